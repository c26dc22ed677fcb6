// PRIVATE header: MVUE 2:4 of dY written straight into the weight-gradient kernels' operands of
// dYᵀ, for the kernels layer's fused routes: nm_wgrad's lane form (the permute kernel's operand,
// nm_wgrad_pruned) and nm_gemm_bf16's pair form (nm_wgrad_bf16_pruned). The layouts are restated
// in plain numbers (mvue_avx512.h); the kernels layer checks them against its own
// (nm_gemm_lanes_layout.h, nm_gemm_bf16_layout.h).
#pragma once

#include <cstdint>

#include "nmsparse/core/matrix_view.h"
#include "nmsparse/grad/prune.h"

namespace nms::detail {

// Whether grad_prune_lanes24 runs: 2:4 kMvue along columns (tokens), the AVX-512 level, T a
// multiple of 16 and out (g.cols()) a multiple of 32.
bool grad_prune_lanes24_applies(ConstMatrixViewF g, const GradPruneOptions& options);

// The lane form of MVUE(g)ᵀ: (out / 32) · (T / 16) · 8 · 32 entries in `values` and `lanes`
// (64-byte aligned), bitwise grad_prune_compressed's values and indices rearranged. Parallel over
// 512-column strips and row parts (any thread count, the same bits). Throws as grad_prune does on
// a NaN / Inf input or an overflowing group. Requires grad_prune_lanes24_applies.
void grad_prune_lanes24(ConstMatrixViewF g, const GradPruneOptions& options, float* values,
                        int32_t* lanes);

// Whether grad_prune_lanes runs: kMvue of an n:m with m dividing 16 along columns (tokens), the
// AVX-512 level, T a multiple of 16 and out a multiple of 32.
bool grad_prune_lanes_applies(ConstMatrixViewF g, const GradPruneOptions& options);

// grad_prune_lanes24's form for any such n:m: (out / 32) · (T / 16) · (16 / m · n) · 32 entries
// (the permute kernel's NmGemmLaneLayout with rows = out, depth = T), bitwise
// grad_prune_compressed's values and indices rearranged. Same threads and errors.
void grad_prune_lanes(ConstMatrixViewF g, const GradPruneOptions& options, float* values,
                      int32_t* lanes);

// nm_gemm_bf16's operand of MVUE(g)ᵀ (2:4, values rounded to bf16): (out / 32) · ceil(T / 32) · 8
// · 64 words in `values` and `index` (64-byte aligned), bitwise nm_gemm_bf16_pack of
// grad_prune_compressed's output, except the pairs past T of a last chunk of 16 tokens, which it
// does not write (the caller zero-fills them). Same conditions, threads and errors as above.
void grad_prune_pairs24_bf16(ConstMatrixViewF g, const GradPruneOptions& options, uint16_t* values,
                             uint16_t* index);

}  // namespace nms::detail
