// PRIVATE header: MVUE 2:4 of dY written straight into nm_wgrad's lane form of dYᵀ (the permute
// kernel's operand), for the kernels layer's fused weight-gradient route (nm_wgrad_pruned). The
// layout is restated in plain numbers (mvue_avx512.h: mvue24_lanes_avx512); the kernels layer
// checks it against its own (nm_gemm_lanes_layout.h).
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

}  // namespace nms::detail
