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

// dYᵀ packed for the kernel (layout: src/kernels/wgrad/wgrad_kernels.h). Opaque apart from its
// shape; `slots` holds (ceil(rows / 6) · 6 · tokens / m · n) entries of {float value, int32 byte
// offset}, one 64-bit word each.
struct NmWgradOperand {
  int64_t rows = 0;    // out: rows of dYᵀ = rows of dW
  int64_t tokens = 0;  // T: the reduction length
  NmPattern pattern;
  int64_t k_block = 0;  // tokens per K-block (a multiple of m); 0 until packed
  AlignedBuffer<uint64_t> slots;
};

// Reusable buffers for nm_wgrad: the packed operand and the per-work-item X panels. Once warmed
// (same shapes), a call allocates nothing.
struct NmWgradWorkspace {
  NmWgradOperand operand;
  AlignedBuffer<float> x_panels;
};

// True for every valid pattern: kernel A's cost does not depend on m (the AVX-512 kernel runs
// whenever isa_active() == Isa::kAvx512).
bool nm_wgrad_has_fast_path(NmPattern pattern);

// Packs dYᵀ from a kCols compression of dY (into `dst`, reusing its buffer when the size fits).
// Parallel over row tiles. Throws on a wrong axis, an invalid structure or an index >= m.
void nm_wgrad_pack_into(const CompressedNm& dy, NmWgradOperand& dst);
NmWgradOperand nm_wgrad_pack(const CompressedNm& dy);

// dW = dYᵀ · X from a packed operand: x [a.tokens, in] (any ld), dw [a.rows, in] (any ld,
// overwritten, must not overlap x). `ws` (optional) keeps the X panels between calls.
void nm_wgrad(const NmWgradOperand& a, ConstMatrixViewF x, MatrixViewF dw,
              NmWgradWorkspace* ws = nullptr);

// Packs dy (into ws->operand when ws is given) and runs the product above.
void nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
              NmWgradWorkspace* ws = nullptr);

}  // namespace nms
