// Weight-gradient GEMM with bf16 inputs and fp32 accumulation: dW [out, in] = D̂ᵀ · X̂ (+ the decay
// term), D̂ = dY pruned N:M along tokens (e.g. MVUE) and rounded to bf16, X̂ = X rounded to bf16
// (round to nearest even, core/half.h). The third GEMM of a training layer whose forward and
// backward-data GEMMs run on nm_gemm_bf16 (SparseLinearConfig::inputs = kBf16).
//
//   dy  CompressedNm of dY [T, out] with axis == kCols (nm_wgrad.h): row o of dYᵀ, T / m · n
//       kept slots; m must divide 32 (nm_gemm_bf16_supports).
//   x   X [T, in], fp32 (any ld >= in); dw [out, in] fp32 (any ld >= in; overwritten).
//
// Method: dWᵀ = X̂ᵀ · D̂ is nm_gemm_bf16's product with A = D̂ᵀ [out, T] (N:M along its depth T)
// and the rows of X̂ᵀ [in, T] as its tokens. Per call: dYᵀ is packed into nm_gemm_bf16's operand
// (O(out · T · n/m)) and X transposed and rounded into X̂ᵀ (O(T · in), 16 x 16 blocks through
// registers); the kernel then runs its permute loop (one vpermw + one vdpbf16ps per pair of kept
// slots and 16 out features) and writes each 8 in x 32 out tile straight into dW through a 16 x 16
// in-register transpose, starting from the decay term in its first K block: no dWᵀ buffer and no
// pass over dW outside the kernel (a dW of 8 MB or more that one K block of 2048 tokens covers is
// written in whole lines with streaming stores).
//
// Arithmetic: each dW element is nm_gemm_bf16's chain over the row's pairs of slots (the second
// slot's product added first, each addition rounded, denormals read and written as 0), starting
// from 0 or, with the decay, from λ · W(o, i) where the mask drops W(o, i) (computed in fp32, a
// denormal start flushed to signed 0). Bound: |dW − start − Σ d̂ x̂| <= γ_s (|start| + Σ |d̂ x̂|),
// γ_s = (s + 1) u / (1 − (s + 1) u), u = 2⁻²⁴, s = T / m · n. The scalar level (below AVX-512 BF16)
// computes the same additions in the same order: the same bits, for any thread count.
//
// Errors (nms::Error naming the value): those of nm_wgrad (dy's axis and structure, x's rows,
// dw's shape, overlaps, the decay's shapes) and a pattern whose m does not divide 32.
#pragma once

#include <cstdint>
#include <string>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/kernels/nm_wgrad.h"

namespace nms {

// Reusable buffers of nm_wgrad_bf16: once warmed (same shapes), a call allocates nothing.
struct NmWgradBf16Workspace {
  NmGemmBf16Operand dy_t;       // D̂ᵀ packed for nm_gemm_bf16
  AlignedBuffer<uint16_t> x_t;  // X̂ᵀ [in, T]
  CompressedNm pruned_dy;       // nm_wgrad_bf16_pruned: the pruned dY
};

// dW = D̂ᵀ · X̂ (+ decay), as described above.
void nm_wgrad_bf16(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                   NmWgradBf16Workspace* ws = nullptr, const NmWgradDecay* decay = nullptr);

// The same with dY [T, out] dense, pruned here by `prune` along tokens (axis kCols): the same bits
// as grad_prune_compressed_into(dy, prune, c) followed by nm_wgrad_bf16(c, x, dw, ws, decay), and
// the same errors. For 2:4 MVUE with T % 16 == 0 and out % 32 == 0 on the AVX-512 BF16 level the
// pruning writes the kernel's operand of D̂ᵀ directly (no compressed dY written, read back and
// packed: 12.8 -> 10.1 ms for dY 6400 x 768, one thread, Zen 4, bench_wgrad BM_NmWgradBf16Pruned).
void nm_wgrad_bf16_pruned(ConstMatrixViewF dy, const GradPruneOptions& prune, ConstMatrixViewF x,
                          MatrixViewF dw, NmWgradBf16Workspace* ws = nullptr,
                          const NmWgradDecay* decay = nullptr);

// Empty when nm_wgrad_bf16(dy, x, dw, ws, decay) would run, else the message of its error.
std::string nm_wgrad_bf16_check(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                                const NmWgradDecay* decay = nullptr);

}  // namespace nms
