// Greedy transposable N:M masks (the 2-approximation of Hubara et al. 2021, two orders).
//
// Per m x m tile, entries are ordered by a strict total order on (score, tile-local flat index
// r * m + c), so the result never depends on sort stability:
//   kKeepHeavyFirst  (the reference code's update_mask_approx2, fixed for every n): descending
//     score, ties lower index first; keep (r, c) iff its row and its column keep < n. Greedy
//     b-matching: kept score >= 1/2 of the best "<= n" mask, hence >= 1/2 of the exact "= n"
//     optimum. Stops once n * m are kept.
//   kPruneLightFirst (the paper's algorithm): ascending score, ties higher index first (the exact
//     reverse of the keep order); prune (r, c) iff its row OR its column has pruned < m - n. A
//     greedy b-edge cover: pruned score <= 2x the minimum, every row and column prunes >= m - n
//     (so keeps <= n), often more. Stops once every row and column has pruned m - n.
// Both are always valid (<= n kept per tile row and column) and need not keep exactly n.
//
// Complexity: O(m^2 log m) per tile (the sort), O(m^2) workspace per running row-block task.
// Parallel over row-blocks of tiles with detail::solve_tile_rows; per-block objectives are summed
// in block order, so masks and stats are bitwise identical for any thread count.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "mask/tile_rows.h"
#include "nmsparse/mask/transposable.h"

namespace nms {

TransposableResult mask_transposable_greedy(ConstMatrixViewF scores, NmPattern pattern,
                                            GreedyOrder order) {
  check_transposable_input(scores, pattern);
  NMS_CHECK(order == GreedyOrder::kKeepHeavyFirst || order == GreedyOrder::kPruneLightFirst,
            "unknown GreedyOrder ", static_cast<int>(order));
  const int n = pattern.n;
  const int m = pattern.m;
  const int64_t tiles_per_row = scores.cols() / m;
  const bool keep_heavy = order == GreedyOrder::kKeepHeavyFirst;

  return detail::solve_tile_rows(
      scores, pattern, SolveStatus::kFeasible, [&](int64_t b, BitMask& mask) {
        const int mm = m * m;
        std::vector<std::pair<float, int>> entries(static_cast<size_t>(mm));
        std::vector<uint8_t> keep(static_cast<size_t>(mm));
        std::vector<int> row_count(static_cast<size_t>(m));
        std::vector<int> col_count(static_cast<size_t>(m));
        double objective = 0.0;
        int64_t iterations = 0;
        int64_t full = 0;
        const int64_t i0 = b * m;
        for (int64_t t = 0; t < tiles_per_row; ++t) {
          const int64_t j0 = t * m;
          for (int r = 0; r < m; ++r) {
            const float* row = scores.row(i0 + r) + j0;
            for (int c = 0; c < m; ++c)
              entries[static_cast<size_t>(r * m + c)] = {row[c], r * m + c};
          }
          std::fill(row_count.begin(), row_count.end(), 0);
          std::fill(col_count.begin(), col_count.end(), 0);
          if (keep_heavy) {
            std::sort(entries.begin(), entries.end(), [](const auto& x, const auto& y) {
              return x.first > y.first || (x.first == y.first && x.second < y.second);
            });
            std::fill(keep.begin(), keep.end(), uint8_t{0});
            int kept = 0;
            for (const auto& [score, k] : entries) {
              if (kept == n * m) break;
              ++iterations;
              const int r = k / m;
              const int c = k % m;
              if (row_count[r] < n && col_count[c] < n) {
                keep[k] = 1;
                ++row_count[r];
                ++col_count[c];
                ++kept;
              }
            }
          } else {
            std::sort(entries.begin(), entries.end(), [](const auto& x, const auto& y) {
              return x.first < y.first || (x.first == y.first && x.second > y.second);
            });
            std::fill(keep.begin(), keep.end(), uint8_t{1});
            const int need = m - n;  // prunes each row and column must reach
            int unsatisfied = need > 0 ? 2 * m : 0;
            for (const auto& [score, k] : entries) {
              if (unsatisfied == 0) break;
              ++iterations;
              const int r = k / m;
              const int c = k % m;
              if (row_count[r] < need || col_count[c] < need) {
                keep[k] = 0;
                unsatisfied -= ++row_count[r] == need;
                unsatisfied -= ++col_count[c] == need;
              }
            }
          }
          // Emit in row-major order; recount kept per row and column for tiles_exactly_n.
          std::fill(row_count.begin(), row_count.end(), 0);
          std::fill(col_count.begin(), col_count.end(), 0);
          for (int r = 0; r < m; ++r) {
            const float* row = scores.row(i0 + r) + j0;
            for (int c = 0; c < m; ++c) {
              if (!keep[static_cast<size_t>(r * m + c)]) continue;
              mask.set(i0 + r, j0 + c);
              objective += row[c];
              ++row_count[r];
              ++col_count[c];
            }
          }
          bool exactly = true;
          for (int k = 0; k < m; ++k) exactly &= row_count[k] == n && col_count[k] == n;
          full += exactly;
        }
        return detail::TileRowStats{objective, iterations, full};
      });
}

}  // namespace nms
