// PRIVATE header: the SIMD kernels of nm_gemm (nm_gemm_avx512.cpp and nm_gemm_avx2.cpp, each the
// only unit built with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

struct NmGemmArgs {
  const float* x;  // [tokens, depth], row stride ldx
  int64_t ldx;
  const float* packed;    // nm_gemm_layout.h
  const uint8_t* shared;  // per (depth block, tile): the rows keep the same columns (nm_gemm.h)
  int64_t rows, depth;
  int n, m;
  float* y;  // [tokens, rows], row stride ldy
  int64_t ldy;
};

// Rows [t0, t0 + width) of Y, width <= kNmGemmPanel: every output element is the fused
// multiply-add chain over its kept slots in order from 0, bitwise the scalar path's result.
// `scratch`: 64-byte aligned, NmGemmLayout::scratch_floats() floats.
void nm_gemm_avx512_panel(const NmGemmArgs& a, int64_t t0, int64_t width, float* scratch);

// The same with AVX2 + FMA (nm_gemm_avx2.cpp; called after isa_active() >= Isa::kAvx2).
void nm_gemm_avx2_panel(const NmGemmArgs& a, int64_t t0, int64_t width, float* scratch);

}  // namespace nms::detail
