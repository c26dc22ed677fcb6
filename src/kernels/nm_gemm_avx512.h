// PRIVATE header: the AVX-512 kernel of nm_gemm (nm_gemm_avx512.cpp, the only unit built with
// AVX-512 flags; called after isa_active() == Isa::kAvx512). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

struct NmGemmArgs {
  const float* x;  // [tokens, depth], row stride ldx
  int64_t ldx;
  int64_t depth;  // K
  const float* values;
  const uint8_t* lanes;  // blocked layout (nm_gemm_layout.h)
  int64_t blocks, chunks, slots;
  int64_t rows;  // R
  float* y;      // [tokens, rows], row stride ldy
  int64_t ldy;
};

// Rows [t_begin, t_end) of Y = X · Aᵀ. Each output element is the fused multiply-add chain over
// (chunk, slot) in order, starting from 0: bitwise the scalar path's result.
void nm_gemm_avx512_rows(const NmGemmArgs& a, int64_t t_begin, int64_t t_end);

}  // namespace nms::detail
