// Weight-gradient GEMM of an N:M training layer: dW [out, in] = dYᵀ · X, with dY pruned N:M along
// tokens (e.g. by MVUE, grad_prune_compressed with axis kCols).
//
//   dy  CompressedNm of dY [T, out] with axis == kCols: value row o = column o of dY = row o of
//       dYᵀ, T / m · n kept slots per row (canonical form, padding slots hold +0.0).
//   x   X [T, in], fp32 row-major, any ld >= in.
//   dw  dW [out, in], any ld >= in; overwritten.
//   dW[o, i] = Σ_s dy.values[o, s] · X[token(o, s), i],  token(o, s) = (s / n) · m + index(o, s).
//
// Kernel ("kernel A" of research/kernels.md): lanes = 16 consecutive input features, the sparse
// operand broadcast. Per work item and K-block of 64 tokens (rounded down to a multiple of m, so
// groups never straddle blocks): X is packed into [k_block][128] panels (32 KiB, L1-resident);
// per chunk of 32 row tiles, every row of dYᵀ is decoded from the compressed bit stream into a
// tile of {value, byte offset of the token's panel row} streams (AVX-512 bit-field decoder; every
// row has the same slot count per block, so the micro-kernel's trip count is fixed and its cost
// does not depend on m). Micro-tile 3 rows x 128 columns = 24 zmm accumulators: per slot and row
// one broadcast of the value, one offset load and 8 fused multiply-adds with the panel row as a
// memory operand. Loops: K-block -> pack X -> row chunk (decode) -> panel -> row tile.
// Layouts: src/kernels/wgrad/wgrad_kernels.h.
// Cost: O(out · T · n/m · in) multiply-adds (n/m of the dense GEMM) + O(out · T · n/m) decoding
// per column chunk + O(T · in) packing of X per row chunk (work items split the dimension whose
// duplicated packing is smaller). Workspace: per item 64 · 128 · (columns / 128) floats of X and
// 2 · 32 · 3 · 80 words of tiles; nothing proportional to the operands.
//
// Results: every dW element is the fused multiply-add chain over its row's slots in order
// (padding included), starting from +0.0. That order does not depend on the K-block, the tiling,
// the thread count or the ISA level: results are bitwise identical for any thread count and at
// every level (scalar: std::fma over the same decoded tiles; avx2 an AVX2+FMA micro-tile; avx512
// the micro-kernel above). The error against the exact product is at most γ_k Σ_s |dy_s x_s| per
// element, γ_k = k u / (1 - k u), u = 2^-24, k = T / m · n.
// Threads: work items are disjoint blocks of dW (row ranges of whole tiles or column ranges of
// whole panels); each walks every K-block in order. No reduction across threads.
//
// Measured (bench_wgrad --benchmark_min_time=1, one run; dev machine: 2-core Sapphire-Rapids-class
// Xeon VM shared with other jobs, load 0.8-1.3; OpenBLAS 0.3.21 cblas_sgemm on the masked dense
// dY timed alternately in the same process; medians; our time includes decoding dY and packing X,
// excludes MVUE pruning; max relative error 1.4e-6 to 2.7e-6):
//   out x in, T        N:M    1 thread: dense / ours ms, ratio   2 threads: dense / ours, ratio
//   3072 x 768, 8192   2:4    254.1 / 207.8, 1.22x              137.6 / 118.2, 1.16x (best 1.27)
//   768 x 3072, 8192   2:4    249.2 / 220.5, 1.13x              134.6 / 143.7, 0.94x (best 1.13)
//   2048 x 2048, 2048  2:4    111.4 /  95.0, 1.17x               59.4 /  47.8, 1.24x
//   3072 x 768, 8192   1:4    266.3 / 126.9, 2.10x              137.3 /  73.5, 1.87x
//   3072 x 768, 8192   4:8    263.9 / 212.8, 1.24x              137.0 / 108.8, 1.26x
//   3072 x 768, 8192   8:16   265.1 / 213.5, 1.24x              136.0 / 128.3, 1.06x (best 1.20)
// Below the 1.4x floor of research/kernels.md (measured 1.35-1.49x on a Zen 4): on this Xeon a zmm
// FMA with a 64-byte load operand sustains only ~4.4-4.7 G/s (7.0 G/s register-only), so kernel
// A's one load per FMA caps the micro-kernel near 110 useful GFLOP/s in L1 for every tile shape
// tried, while OpenBLAS runs at ~155 effective GFLOP/s: ~1.4x is this kernel's ceiling here.
//
// Errors (nms::Error, naming the values): dy.axis not kCols, an invalid pattern or compressed
// structure (sizes; an index >= m; debug builds run nm_validate), T (dy.rows) != x.rows(), dw not
// [dy.cols, x.cols()], dw overlapping x.
#pragma once

#include <cstdint>
#include <string>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {

// Reusable buffers for nm_wgrad, per work item: the X panels of one K-block and the decoded dYᵀ
// tiles of one chunk of rows. Once warmed (same shapes and thread count), a call allocates nothing.
struct NmWgradWorkspace {
  AlignedBuffer<float> x_panels;  // kernel A: a K-block of X; kPermute: all of X in panels
  AlignedBuffer<float> tile_values;
  AlignedBuffer<int32_t> tile_offsets;
  NmGemmOperand dy_t;        // AVX-512: dYᵀ packed for nm_gemm's kernels
  AlignedBuffer<float> x_t;  // kPermute: Xᵀ [in, T]
  CompressedNm pruned_dy;    // nm_wgrad_pruned: the pruned dY where it is not fused
};

// True for every valid pattern: kernel A's cost does not depend on m (the AVX-512 kernel runs
// whenever isa_active() == Isa::kAvx512).
bool nm_wgrad_has_fast_path(NmPattern pattern);

// SR-STE's decay term λ (1 − M) ⊙ W, added by nm_wgrad as it first writes each dW element: the
// element's chain of multiply-adds starts from λ·W(o, i) where the mask drops it (keep == 0) and
// from 0 where it keeps it, instead of always from 0. This saves the separate pass over dW, W and
// M (a read and write of dW per step; ~52 ms of a 4096 x 4096 MLP step at DRAM speed).
struct NmWgradDecay {
  ConstMatrixViewF w;             // [out, in], any ld
  const uint8_t* keep = nullptr;  // [out, in] bytes, row stride keep_ld: nonzero = kept
  int64_t keep_ld = 0;
  float lambda = 0.0f;
};

// Which kernel computes dW (the same bits either way; kGemm at the AVX2 and AVX-512 levels,
// kPermute at AVX-512 only; the scalar level always takes A):
//   kPanels  kernel A above (panels of X, dW swept once per K-block);
//   kGemm    nm_gemm's kernel on dWᵀ = Xᵀ · (dYᵀ)ᵀ: dYᵀ packed as its operand (O(out · T · n/m)
//            per call), the in features of X as its tokens, each output block kept in L2 over the
//            whole reduction and written to dW once (nm_gemm.h);
//   kPermute the hybrid form of nm_gemm's permute kernel on the same product
//            (nm_gemm_lanes_layout.h): dYᵀ in its lane form (O(out · T · n/m) per call), X
//            transposed and in 32-column panels (O(T · in) each); per walk over a row block's
//            slots, permute-fed FMAs for 4 in features x 32 out features (16 out features per
//            vector, the tile of dWᵀ transposed in registers as it is loaded and stored) and
//            load-fed FMAs for 4 out features x 32 in features, to balance the shuffle and FMA
//            pipes (6 and 2 at 1:4); where m divides 16 (kPanels otherwise);
//   kAuto    at AVX-512, kPermute where nm_gemm_kernel_active() is the permute kernel, m
//            divides 16 and X has at least 512 columns; otherwise kGemm for a large dW and short T,
//            where kernel A's sweeps of dW dominate, and kPanels for the rest. At AVX2, kGemm
//            (2.1-2.2x faster than A on Zen 2). Measured in nm_wgrad.cpp.
enum class NmWgradKernel { kAuto, kPanels, kGemm, kPermute };

// dW = dYᵀ · X (+ the decay term when `decay` is given). dy: kCols compression of dY [T, out];
// x [T, in] (any ld >= in); dw [out, in] (any ld >= in, overwritten, must not overlap x or
// decay->w). `ws` (optional) keeps the buffers between calls.
void nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
              NmWgradWorkspace* ws = nullptr, const NmWgradDecay* decay = nullptr,
              NmWgradKernel kernel = NmWgradKernel::kAuto);

// dW = (pruned dY)ᵀ · X with dY [T, out] dense and pruned here by `prune` (along tokens: axis
// kCols): the same bits as grad_prune_compressed_into(dy, prune, c) followed by nm_wgrad(c, x, dw,
// ws, decay, kernel), and the same errors (a NaN / Inf in dY names its element). Where the permute
// route runs with 2:4 MVUE (AVX-512, T % 16 == 0, out % 32 == 0), the pruning writes that route's
// operand (dYᵀ in its lane form) directly: no compressed dY is written, read back and decoded.
// (One thread, Zen 4: for dY 8192 x 3072 the fused pruning took 15.9 ms against 18.9 for the
// compressed form plus 11.9 for the lane form built from it; `nmsparse bench kernels --gemms
// weight_grad` at 8192 x 768 -> 3072 went from 262-265 to 248-250 ms, 1.38x to 1.48x of sgemm.)
void nm_wgrad_pruned(ConstMatrixViewF dy, const GradPruneOptions& prune, ConstMatrixViewF x,
                     MatrixViewF dw, NmWgradWorkspace* ws = nullptr,
                     const NmWgradDecay* decay = nullptr,
                     NmWgradKernel kernel = NmWgradKernel::kAuto);

// Whether nm_wgrad(dy, x, dw, ws, decay) would run: empty when it would, otherwise the message of
// the nms::Error it would throw (the same checks, nothing computed).
std::string nm_wgrad_check(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                           const NmWgradDecay* decay = nullptr);

}  // namespace nms
