// PRIVATE header: the scalar arithmetic of nm_gemm_bf16 (nmsparse/kernels/nm_gemm_bf16.h), shared
// by its scalar path and nm_wgrad_bf16's: vdpbf16ps's additions in its order, so that the scalar
// level and the AVX-512 BF16 kernel give the same bits.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/nm_gemm_bf16_layout.h"
#include "nmsparse/core/half.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"

namespace nms::detail {

// vdpbf16ps's input and output handling: denormals read as, and flushed to, zero (sign kept).
inline float flush_denormal(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  return (bits & 0x7f800000u) == 0 ? std::bit_cast<float>(bits & 0x80000000u) : v;
}

// One bf16 product added to acc as vdpbf16ps does it: the product of two bf16 values is exact in
// fp32 (8-bit significands), so only the addition rounds.
inline float add_bf16_product(float acc, uint16_t x, uint16_t w) {
  const float product = flush_denormal(bf16_to_f32(x)) * flush_denormal(bf16_to_f32(w));
  return flush_denormal(acc + product);
}

// What vcvtneps2bf16 / vcvtne2ps2bf16 give (the kernels' rounding of fp32 operands): f32_to_bf16
// (round to nearest even) of the value, a denormal input read as signed zero (Zen 4: 2^-130 ->
// 0x0000, -1.5 · 2^-127 -> 0x8000). The products ignore denormal bf16 inputs either way, so only
// the packed words, not the results, would differ without the flush.
inline uint16_t round_operand_bf16(float v) {
  return f32_to_bf16(flush_denormal(v));
}

inline uint16_t as_bf16(uint16_t x) {
  return x;
}
inline uint16_t as_bf16(float x) {
  return round_operand_bf16(x);
}

// Output (x row, row r of A) from `acc`: per chunk, per pair of slots, the second slot's product
// added first, then the first's (vdpbf16ps's order). x: the row's `a.depth` values (fp32 rounded
// here, or bf16 bit patterns).
template <class T>
float bf16_row_chain(const T* x, const NmGemmBf16Operand& a, const NmGemmBf16Layout& lay, int64_t r,
                     float acc) {
  const int64_t b = r / kBf16Rows;
  const int64_t l = r % kBf16Rows;
  for (int64_t c = 0; c < lay.chunks; ++c) {
    const int64_t cols = std::min(kBf16Chunk, a.depth - c * kBf16Chunk);
    const int64_t pairs = (cols / a.pattern.m * a.pattern.n + 1) / 2;
    const int64_t base = lay.offset(b, c, 0);
    for (int64_t p = 0; p < pairs; ++p) {
      for (int64_t s : {2 * p + 1, 2 * p}) {  // vdpbf16ps: the odd word first
        const int64_t at = base + NmGemmBf16Layout::word(s, l);
        const int64_t col = c * kBf16Chunk + a.index.data()[at];
        const uint16_t xv = col < a.depth ? as_bf16(x[col]) : uint16_t{0};
        acc = add_bf16_product(acc, xv, a.values.data()[at]);
      }
    }
  }
  return acc;
}

}  // namespace nms::detail
