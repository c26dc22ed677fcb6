// PRIVATE header: the parallel frame shared by the transposable solvers.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "nmsparse/mask/transposable.h"

namespace nms::detail {

// What one row of m x m tiles contributes to TransposableStats.
struct TileRowStats {
  double objective = 0.0;
  int64_t iterations = 0;
  int64_t tiles_exactly_n = 0;
};

// Calls solve_row(tile_row, mask) -> TileRowStats for every row of tiles in parallel; a call
// writes only mask rows [tile_row * m, tile_row * m + m), which no other call touches. The rows'
// stats are then summed in row order, so masks and stats are bitwise the same for any thread
// count. The caller has validated the input (check_transposable_input). Debug builds then run
// check_transposable_result on the result.
template <class SolveRow>
TransposableResult solve_tile_rows(ConstMatrixViewF scores, NmPattern pattern, SolveStatus status,
                                   SolveRow&& solve_row) {
  const int64_t tile_rows = scores.rows() / pattern.m;
  TransposableResult result;
  result.mask = BitMask(scores.rows(), scores.cols());
  std::vector<TileRowStats> per_row(static_cast<size_t>(tile_rows));
  parallel_for(tile_rows,
               [&](int64_t r) { per_row[static_cast<size_t>(r)] = solve_row(r, result.mask); });
  TransposableStats& st = result.stats;
  st.status = status;
  st.tiles = tile_rows * (scores.cols() / pattern.m);
  for (const TileRowStats& r : per_row) {
    st.objective += r.objective;
    st.iterations += r.iterations;
    st.tiles_exactly_n += r.tiles_exactly_n;
  }
#ifndef NDEBUG
  // Debug builds check every result independently: N:M in both directions (exactly n for a
  // solver that claims optimality), the exactly-n tile count and the objective recomputed. The
  // tests run the same check in every build type.
  check_transposable_result(scores, pattern, result, status == SolveStatus::kOptimal);
#endif
  return result;
}

}  // namespace nms::detail
