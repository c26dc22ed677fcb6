// PRIVATE header of the CUDA backend: the kernels on device-resident data, for the host API
// (mask.cu, mvue.cu) and the benchmark (bench/cuda). Shapes are validated by the callers; these
// only launch (on the default stream) and do not wait.
#pragma once

#include <cstdint>

#include "cuda/kernel_bodies.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/grad/prune.h"

namespace nms::cuda::detail {

// Transposable mask of the rows x cols scores (row stride ld) into `words` (rows x words_per_row
// 64-bit words, BitMask layout); tile_bits is scratch of rows * (cols / m) words.
void launch_transposable(const float* scores, int64_t rows, int64_t cols, int64_t ld,
                         NmPattern pattern, TileSolver solver, uint64_t* tile_bits, uint64_t* words,
                         TileCounters* counters);

// Row-wise top-n-of-m mask (mask_nm_rows) into `words`; *bad (zeroed by the caller) becomes
// nonzero when a score is negative or NaN.
void launch_nm_rows(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern pattern,
                    uint64_t* words, unsigned* bad);

// Bi-Mask backward mask into `words` (every word written): w [rows, cols], fwd the forward
// mask's words, perm the row permutation.
void launch_bimask_backward(const float* w, int64_t rows, int64_t cols, int64_t ld,
                            const uint64_t* fwd, const int64_t* perm, NmPattern pattern,
                            uint64_t* words);

// Gradient pruning (grad_prune_into) of g into out; *bad (zeroed by the caller) becomes nonzero
// for a non-finite input or an fp32 overflow of a group's magnitudes.
void launch_grad_prune(const float* g, int64_t rows, int64_t cols, int64_t ld,
                       const GradPruneOptions& options, float* out, int64_t ld_out, unsigned* bad);

}  // namespace nms::cuda::detail
