// PRIVATE header: the last two steps of the entropic transposable solver (local search, then the
// exact-n repair; src/mask/transposable_entropic.cpp) on one tile that an earlier step rounded,
// so that a solver which does the earlier steps elsewhere (the GPU, src/cuda/entropic.cu)
// finishes its tiles exactly as mask_transposable_entropic does. m <= 64.
#pragma once

#include <cstdint>

#include "nmsparse/mask/transposable.h"

namespace nms::detail {

// tile: the m x m raw scores (row stride ld); keep_rows[i] bit j: (i, j) kept, <= n per row and
// column on entry. Runs options.local_search_steps swaps at most, then (options.repair) augments
// until every row and column keeps exactly n, and writes the mask back. Returns the swaps plus
// augmentations. Cost O(L d^2 m^2 + d m^3) for a deficit d; a tile keeping exactly n everywhere
// is returned unchanged.
int64_t entropic_finish_tile(const float* tile, int64_t ld, int n, int m,
                             const EntropicOptions& options, uint64_t* keep_rows);

// entropic_finish_tile on `count` tiles stored densely (tiles [count][m][m], keep_rows
// [count][m]), in parallel over tiles (OpenMP; each tile is independent, so the result does not
// depend on the thread count). Returns the summed steps.
int64_t entropic_finish_tiles(const float* tiles, int64_t count, int n, int m,
                              const EntropicOptions& options, uint64_t* keep_rows);

}  // namespace nms::detail
