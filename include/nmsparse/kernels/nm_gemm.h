// Sparse GEMMs for the three training GEMMs of an N:M linear layer y = x Wᵀ, W [out, in], fp32:
//
//   forward          Y  [T, out] = X  [T, in]  · Wᵀ    W N:M along in      (W compressed kRows)
//   backward-data    dX [T, in]  = dY [T, out] · W     Wᵀ N:M along out    (W compressed kCols:
//                                                       a transposable mask, or Bi-Mask's
//                                                       permuted backward operand)
//   weight-gradient  dW [out, in] = dYᵀ · X            dY N:M along tokens (dY compressed kCols,
//                                                       e.g. grad_prune_compressed's MVUE output)
//
// The first two are one operation, Y = X · Aᵀ with A [R, K] N:M along K: A = W for the forward
// GEMM, A = Wᵀ for backward-data. nm_gemm_pack turns the compressed matrix into the blocked
// operand the kernel streams (per block of output features and 16-wide chunk of K: the kept
// values and their lane indices); it is the per-step cost of a changing mask and is O(R · K · N/M).
//
// Results: every output element is a sum over its kept products in a fixed order that does not
// depend on the thread count (bitwise identical for any thread count); the kernels at different
// ISA levels (isa.h) may sum in different orders, within the fp32 rounding bound stated by the
// tests. Validation happens here, at the API boundary (shapes, strides, patterns, aliasing); the
// micro-kernels do none. Errors throw nms::Error naming the offending value.
#pragma once

#include <cstdint>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

// A [R, K] N:M along K, blocked for nm_gemm. Opaque apart from its shape.
struct NmGemmOperand {
  int64_t rows = 0;   // R: output features of the GEMM
  int64_t depth = 0;  // K: reduction length
  NmPattern pattern;
  // Layout (src/kernels/nm_gemm_layout.h): blocks of kNmGemmBlockRows rows (the last padded
  // with zero rows); per block, per chunk of 16 along K, per slot s < 16·n/m: kNmGemmBlockRows
  // values and as many lane indices (position of the value inside its chunk, 0..15).
  // Patterns whose m does not divide 16 keep the compressed form (generic path).
  AlignedBuffer<float> values;
  AlignedBuffer<uint8_t> lanes;
  CompressedNm generic;  // used when !blocked
  bool blocked = false;
};

inline constexpr int64_t kNmGemmBlockRows = 32;

// True when nm_gemm has a blocked SIMD path for the pattern (m divides 16: 1:2, 2:4, 1:4, 4:8,
// 8:16, ...); every other valid pattern runs the generic scalar path.
bool nm_gemm_has_fast_path(NmPattern pattern);

// A = W for a kRows compression of W, A = Wᵀ for a kCols compression (any valid pattern).
NmGemmOperand nm_gemm_pack(const CompressedNm& compressed);
// The same into `dst`, reusing its buffers when their sizes fit (no allocation per step).
void nm_gemm_pack_into(const CompressedNm& compressed, NmGemmOperand& dst);

// Y = X · Aᵀ: x [T, K] (any ld >= K), y [T, R] (any ld >= R; overwritten). The address ranges
// x and y span must not overlap (checked; views into the same rows of one buffer are refused).
void nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y);

}  // namespace nms
