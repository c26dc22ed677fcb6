#include <cmath>
#include <cstdint>
#include <limits>

#include "nmsparse/mask/transposable.h"
#include "nmsparse/mask/verify.h"

namespace nms {

void check_transposable_input(ConstMatrixViewF scores, NmPattern pattern) {
  pattern.validate();
  NMS_CHECK(scores.rows() % pattern.m == 0 && scores.cols() % pattern.m == 0, "a transposable ",
            pattern.to_string(), " mask needs rows and cols divisible by m (", pattern.m, "); got ",
            scores.rows(), " x ", scores.cols());
  for (int64_t i = 0; i < scores.rows(); ++i) {
    const float* row = scores.row(i);
    // One branch-free pass (vectorised): NaN fails both compares, +inf the second.
    constexpr float kMax = std::numeric_limits<float>::max();
    uint32_t bad_count = 0;
    for (int64_t j = 0; j < scores.cols(); ++j) {
      bad_count += static_cast<uint32_t>(!((row[j] >= 0.0f) & (row[j] <= kMax)));
    }
    const bool bad = bad_count != 0;
    if (!bad) continue;
    for (int64_t j = 0; j < scores.cols(); ++j) {
      NMS_CHECK(row[j] >= 0.0f && std::isfinite(row[j]), "score (", i, ", ", j, ") is ", row[j],
                "; scores must be finite and non-negative");
    }
  }
}

double mask_score(ConstMatrixViewF scores, const BitMask& mask) {
  NMS_CHECK(mask.rows() == scores.rows() && mask.cols() == scores.cols(), "mask shape (",
            mask.rows(), " x ", mask.cols(), ") differs from the scores (", scores.rows(), " x ",
            scores.cols(), ")");
  double sum = 0.0;
  for (int64_t i = 0; i < scores.rows(); ++i) {
    for (int64_t j = 0; j < scores.cols(); ++j) {
      if (mask.get(i, j)) sum += scores(i, j);
    }
  }
  return sum;
}

int64_t count_tiles_exactly_n(const BitMask& mask, NmPattern pattern) {
  const int m = pattern.m;
  int64_t exactly_n = 0;
  for (int64_t i0 = 0; i0 + m <= mask.rows(); i0 += m) {
    for (int64_t j0 = 0; j0 + m <= mask.cols(); j0 += m) {
      bool full = true;
      for (int k = 0; k < m && full; ++k) {
        full = mask.count_row_range(i0 + k, j0, m) == pattern.n &&
               mask.count_col_range(j0 + k, i0, m) == pattern.n;
      }
      exactly_n += full;
    }
  }
  return exactly_n;
}

void check_transposable_result(ConstMatrixViewF scores, NmPattern pattern,
                               const TransposableResult& result, bool require_exactly_n) {
  const BitMask& mask = result.mask;
  NMS_CHECK(mask.rows() == scores.rows() && mask.cols() == scores.cols(), "mask shape (",
            mask.rows(), " x ", mask.cols(), ") differs from the scores");
  const NmVerifyReport r = verify_nm(mask, pattern);
  NMS_CHECK(r.transposable_valid(), "mask is not transposable ", pattern.to_string(), ": ",
            r.row_violations, " row groups and ", r.col_violations,
            " column groups keep more than ", pattern.n);
  const int m = pattern.m;
  const int64_t exactly_n = count_tiles_exactly_n(mask, pattern);
  const int64_t tiles = (scores.rows() / m) * (scores.cols() / m);
  NMS_CHECK(result.stats.tiles == tiles, "stats.tiles (", result.stats.tiles, ") != ", tiles);
  NMS_CHECK(result.stats.tiles_exactly_n == exactly_n, "stats.tiles_exactly_n (",
            result.stats.tiles_exactly_n, ") != recount (", exactly_n, ")");
  NMS_CHECK(!require_exactly_n || exactly_n == tiles, exactly_n, " of ", tiles,
            " tiles keep exactly n in every row and column; the exact solver must fill all");
  const double objective = mask_score(scores, mask);
  NMS_CHECK(
      std::fabs(objective - result.stats.objective) <= 1e-9 * std::max(1.0, std::fabs(objective)),
      "stats.objective (", result.stats.objective, ") != recomputed (", objective, ")");
}

}  // namespace nms
