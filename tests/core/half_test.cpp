// Exhaustive checks of the fp16/bf16 conversions in nmsparse/core/half.h.
//
// Widening is checked against an independent decoder written with std::ldexp; narrowing is checked
// against a nearest-value search over the table of all finite 16-bit values (ties to the even bit
// pattern), over every fp16/bf16 value, every midpoint between neighbours and its two float
// neighbours, plus a strided sweep over all 2^32 float bit patterns.
#include "nmsparse/core/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}
bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
}

// Independent decoder: the textbook formula, evaluated in double.
double f16_reference_value(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(Half, F16WideningIsExactForAllPatterns) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = f16_to_f32(bits);
    const double expected = f16_reference_value(bits);
    if (f16_is_nan(bits)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), expected) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    }
  }
}

TEST(Half, F16RoundTripsAllPatternsBitExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << std::hex << h;
  }
}

TEST(Half, Bf16RoundTripsAllPatternsBitExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bf16_to_f32(bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    ASSERT_EQ(f32_to_bf16(f), bits) << std::hex << b;
    EXPECT_EQ(std::isnan(f), bf16_is_nan(bits));
  }
}

// Reference narrowing: nearest entry of the sorted table of non-negative finite fp16 values; a tie
// picks the even bit pattern; at or above 65520 (the midpoint to the virtual next value 65536,
// which would be "even") the result is Inf.
uint16_t f16_reference_round(float x) {
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (uint32_t h = 0; h < 0x7c00; ++h)
      t.push_back(f16_reference_value(static_cast<uint16_t>(h)));
    return t;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7c00;
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  if (it == table.end()) return sign | 0x7bff;  // (65504, 65520): below the Inf threshold
  const auto hi = static_cast<uint16_t>(it - table.begin());
  if (table[hi] == a || hi == 0) return sign | hi;
  const auto lo = static_cast<uint16_t>(hi - 1);
  const double dlo = a - table[lo];
  const double dhi = table[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

uint16_t bf16_reference_round(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t lo_bits = bits & 0xffff0000u;
  const double a = std::fabs(static_cast<double>(x));
  const double lo = std::fabs(static_cast<double>(std::bit_cast<float>(lo_bits)));
  // The next bf16 up in magnitude; past the largest finite value it is 2^128 (rounds to Inf).
  const double hi = (lo_bits & 0x7fffffffu) == 0x7f7f0000u
                        ? std::ldexp(1.0, 128)
                        : std::fabs(static_cast<double>(std::bit_cast<float>(lo_bits + 0x10000u)));
  const auto lo16 = static_cast<uint16_t>(lo_bits >> 16);
  const auto hi16 = static_cast<uint16_t>(lo16 + 1);
  if (a - lo < hi - a) return lo16;
  if (hi - a < a - lo) return hi16;
  return (lo16 & 1) ? hi16 : lo16;
}

void expect_narrowing_matches_reference(float x) {
  if (std::isnan(x)) {
    EXPECT_TRUE(f16_is_nan(f32_to_f16(x)));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16(x)));
    return;
  }
  if (std::isinf(x)) {
    EXPECT_EQ(f32_to_f16(x), std::signbit(x) ? 0xfc00 : 0x7c00);
    EXPECT_EQ(f32_to_bf16(x), std::signbit(x) ? 0xff80 : 0x7f80);
    return;
  }
  ASSERT_EQ(f32_to_f16(x), f16_reference_round(x)) << std::hexfloat << x;
  ASSERT_EQ(f32_to_bf16(x), bf16_reference_round(x)) << std::hexfloat << x;
}

TEST(Half, NarrowingMatchesReferenceAtValuesAndMidpoints) {
  // Every finite fp16 value, every midpoint between neighbours (all exactly representable in
  // float), and the floats just either side of each midpoint.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (const uint32_t s : {0u, 0x8000u}) {
      const float v = f16_to_f32(static_cast<uint16_t>(h | s));
      expect_narrowing_matches_reference(v);
      const float next = h + 1 < 0x7c00 ? f16_to_f32(static_cast<uint16_t>((h + 1) | s))
                                        : (s ? -65536.0f : 65536.0f);
      const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
      expect_narrowing_matches_reference(mid);
      expect_narrowing_matches_reference(std::nextafter(mid, 0.0f));
      expect_narrowing_matches_reference(std::nextafter(mid, next));
    }
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint32_t mid_bits = (b << 16) | 0x8000u;
    for (const uint32_t bits : {mid_bits - 1, mid_bits, mid_bits + 1}) {
      expect_narrowing_matches_reference(std::bit_cast<float>(bits));
    }
  }
}

TEST(Half, NarrowingMatchesReferenceOnStridedSweep) {
  // ~4.2M patterns with a prime stride, so every exponent and many mantissa tails are hit.
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 1021) {
    expect_narrowing_matches_reference(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);         // tie between 0 and 2^-24 -> even
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);         // above the tie
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Half, NanPayloadNeverBecomesInf) {
  // A float NaN whose payload lives only in the low mantissa bits must stay NaN when narrowed.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(low_payload_nan)));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(low_payload_nan)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000, 0x8000);
}

TEST(Half, SpanConversions) {
  const std::vector<float> values = {0.0f, 1.0f, -1.5f, 1e-6f, 70000.0f};
  std::vector<uint16_t> halves(values.size());
  f32_to_f16(values, halves);
  std::vector<float> back(values.size());
  f16_to_f32(halves, back);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(halves[i], f32_to_f16(values[i]));
    EXPECT_EQ(back[i], f16_to_f32(halves[i]));
  }
  f32_to_bf16(values, halves);
  bf16_to_f32(halves, back);
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_EQ(back[i], bf16_to_f32(f32_to_bf16(values[i])));
  std::vector<float> wrong(2);
  EXPECT_THROW(f16_to_f32(halves, wrong), Error);
  EXPECT_THROW(f32_to_bf16(wrong, halves), Error);
}

}  // namespace
}  // namespace nms
