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

// Tokens per call: this many 64-token panels share each tile's entries while they are in L1.
inline constexpr int64_t kNmGemmPanelsPerItem = 1;

// Floats of scratch one call needs: the Xᵀ panels and the output panels.
int64_t nm_gemm_avx512_scratch_floats(const NmGemmArgs& a);

// Rows [t0, t0 + width) of Y (width <= 64 · kNmGemmPanelsPerItem): every output element is the
// fused multiply-add chain over its kept slots in order from 0, bitwise the scalar path's result.
// `scratch` is 64-byte aligned, nm_gemm_avx512_scratch_floats(a) floats.
void nm_gemm_avx512_item(const NmGemmArgs& a, int64_t t0, int64_t width, float* scratch);

// The same with AVX2 + FMA (nm_gemm_avx2.cpp; called after isa_active() >= Isa::kAvx2), same
// scratch, bitwise the same results.
void nm_gemm_avx2_item(const NmGemmArgs& a, int64_t t0, int64_t width, float* scratch);

}  // namespace nms::detail
