// IEEE binary16 ("fp16", "half") and bfloat16 ("bf16") <-> binary32 conversion.
//
// Both 16-bit formats are handled as raw bit patterns (uint16_t), so no compiler support for
// _Float16/__bf16 is needed and the results are the same on every compiler and ISA.
//
// Widening (16 -> 32 bits) is exact for every one of the 65536 bit patterns: zeros keep their sign,
// fp16 subnormals become normal floats, Inf stays Inf, and NaN stays NaN with its sign and payload
// (the payload is shifted into the top of the float mantissa; a signalling NaN stays signalling).
//
// Narrowing (32 -> 16 bits) rounds to nearest, ties to even, as IEEE 754 and the hardware
// converters (F16C VCVTPS2PH with imm 0, AVX512-BF16 VCVTNEPS2BF16) do:
//   - fp16: values whose magnitude rounds above 65504 become +-Inf (the threshold is 65520);
//     results below 2^-14 become fp16 subnormals or +-0 with correct rounding.
//   - bf16: finite values that round past the largest bf16 (~3.39e38) become +-Inf.
//   - NaN stays NaN: sign and the top payload bits are kept; if the kept payload would be zero the
//     quiet bit is set so the result cannot turn into Inf. Inf stays Inf.
// Consequently f32_to_f16(f16_to_f32(h)) == h and f32_to_bf16(bf16_to_f32(b)) == b bit for bit,
// for all 65536 patterns (tests/core/half_test.cpp checks every one).
//
// The scalar functions are inline (they sit in conversion loops); the span functions convert
// buffers and require src.size() == dst.size() (nms::Error otherwise).
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace nms {

// ---- bfloat16: the top 16 bits of a binary32 ----

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign + top payload, never become Inf
    uint16_t out = static_cast<uint16_t>(bits >> 16);
    if ((out & 0x007fu) == 0) out |= 0x0040u;
    return out;
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. A carry into the
  // exponent is the correct rounding (up to Inf for the largest finite values).
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// ---- IEEE binary16 ----

inline float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x03ffu;
  if (exponent == 0x1f) {  // Inf or NaN: payload shifted to the top of the float mantissa
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {  // normal: rebias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal: value = mantissa * 2^-24. Normalise so the leading 1 becomes implicit.
  const int shift = std::countl_zero(mantissa) - 21;  // leading 1 moves to bit 10
  mantissa = (mantissa << shift) & 0x03ffu;
  const uint32_t float_exponent = static_cast<uint32_t>(113 - shift);  // 2^(-14 - shift) -> biased
  return std::bit_cast<float>(sign | (float_exponent << 23) | (mantissa << 13));
}

inline uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // Inf or NaN
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    auto payload = static_cast<uint16_t>((abs >> 13) & 0x03ffu);
    if (payload == 0) payload = 0x0200u;  // keep it a NaN
    return static_cast<uint16_t>(sign | 0x7c00u | payload);
  }
  if (abs >= 0x477ff000u) {  // >= 65520 = 65504 + half an ulp: rounds to Inf (tie goes to Inf)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  const auto exponent = static_cast<int>(abs >> 23);  // biased float exponent, 0..142 here
  if (exponent >= 113) {  // normal fp16 range (>= 2^-14): drop 13 mantissa bits with RNE
    const uint32_t rebased = abs - (112u << 23);  // rebias exponent 127 -> 15
    const uint32_t rounding = 0x0fffu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
  }
  // Subnormal or zero result: value = m * 2^-24 with m = full_mantissa * 2^(exponent - 150 + 24).
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie to 0)
  const uint32_t full_mantissa = (abs & 0x007fffffu) | 0x00800000u;  // implicit 1 (exponent >= 1)
  const int shift = 126 - exponent;                                  // 14..24
  const uint32_t kept = full_mantissa >> shift;
  const uint32_t rest = full_mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t round_up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  // A carry out of the subnormal range lands exactly on the smallest normal (0x0400): correct.
  return static_cast<uint16_t>(sign | (kept + round_up));
}

// ---- Buffer conversions (src.size() must equal dst.size()) ----

void f16_to_f32(std::span<const uint16_t> src, std::span<float> dst);
void f32_to_f16(std::span<const float> src, std::span<uint16_t> dst);
void bf16_to_f32(std::span<const uint16_t> src, std::span<float> dst);
void f32_to_bf16(std::span<const float> src, std::span<uint16_t> dst);

}  // namespace nms
