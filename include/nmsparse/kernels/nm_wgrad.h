// Weight-gradient GEMM of an N:M training layer: dW [out, in] = dYᵀ · X, with dY pruned N:M along
// tokens (e.g. by MVUE, grad_prune_compressed with axis kCols).
//
//   dy  CompressedNm of dY [T, out] with axis == kCols: value row o = column o of dY = row o of
//       dYᵀ, T / m · n kept slots per row (canonical form, padding slots hold +0.0).
//   x   X [T, in], fp32 row-major, any ld >= in.
//   dw  dW [out, in], any ld >= in; overwritten.
//   dW[o, i] = Σ_s dy.values[o, s] · X[token(o, s), i],  token(o, s) = (s / n) · m + index(o, s).
//
// Kernel ("kernel A" of research/kernels.md): lanes = 16 consecutive input features. dYᵀ is packed
// once per call (nm_wgrad_pack) into tiles of 6 rows with interleaved {value, byte offset of the
// token's X row} entries, every row with the same slot count per K-block (fixed trip count; the
// index bit stream is decoded here, so every pattern runs the same kernel and its cost does not
// depend on m). X is packed per K-block of ~128 tokens (a multiple of m) into [k_block][64]
// panels that stay in L1. Micro-tile 6 rows x 64 columns = 24 zmm accumulators: per slot and row,
// one broadcast of the value and 4 fused multiply-adds with the panel row at its offset. Loops:
// K-block -> (pack X) -> chunk of 16 row tiles -> panel -> row tile -> micro-kernel.
// Cost: O(out · T · n/m · in) multiply-adds (n/m of the dense GEMM) + O(out · T · n/m) packing of
// dYᵀ + O(T · in) packing of X (once per column chunk of a work item).
//
// Results: every dW element is the fused multiply-add chain over its row's slots in order
// (padding included), starting from +0.0. That order does not depend on the K-block, the tiling,
// the thread count or the ISA level: results are bitwise identical for any thread count and at
// every level (scalar: std::fma over the same packed data; avx2 runs the scalar path; avx512 the
// micro-kernel above). The error against the exact product is at most γ_k Σ_s |dy_s x_s| per
// element, γ_k = k u / (1 - k u), u = 2^-24, k = T / m · n.
// Threads: work items are disjoint blocks of dW (column chunks of panels, then row ranges); each
// item walks every K-block in order. No reduction across threads.
//
// Measured (see the end of this comment for the command): dev machine, 2-core Sapphire-Rapids-
// class Xeon VM shared with other jobs, OpenBLAS 0.3.21 cblas_sgemm on the masked dense dY timed
// alternately in the same process:
//   (filled in by bench_wgrad; see the report in the commit history)
//
// Errors (nms::Error, naming the values): dy.axis not kCols, an invalid pattern or compressed
// structure (sizes, an index >= m), T (dy.rows) != x.rows(), dw not [dy.cols, x.cols()], dw
// overlapping x or dy's values.
#pragma once

#include <cstdint>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

// Reusable buffers for nm_wgrad, per work item: the X panels of one K-block and the decoded dYᵀ
// tiles of one chunk of rows. Once warmed (same shapes and thread count), a call allocates nothing.
struct NmWgradWorkspace {
  AlignedBuffer<float> x_panels;
  AlignedBuffer<float> tile_values;
  AlignedBuffer<int32_t> tile_offsets;
};

// True for every valid pattern: kernel A's cost does not depend on m (the AVX-512 kernel runs
// whenever isa_active() == Isa::kAvx512).
bool nm_wgrad_has_fast_path(NmPattern pattern);

// dW = dYᵀ · X. dy: kCols compression of dY [T, out]; x [T, in] (any ld >= in); dw [out, in] (any
// ld >= in, overwritten, must not overlap x). `ws` (optional) keeps the buffers between calls.
void nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
              NmWgradWorkspace* ws = nullptr);

}  // namespace nms
