#include "mask/transposable_reference.h"

#include <bit>
#include <limits>

#include "nmsparse/core/error.h"

namespace nms::reference {
namespace {

struct Search {
  const double* tile;
  int n;
  int m;
  int cap[5];
  uint64_t bits = 0;
  TileOptimum best{-std::numeric_limits<double>::infinity(), 0};

  void dfs(int row) {
    if (row == m) {
      double sum = 0.0;
      for (int k = 0; k < m * m; ++k) {
        if ((bits >> k) & 1U) sum += tile[k];
      }
      if (sum > best.objective) best = {sum, bits};
      return;
    }
    const int rows_left = m - row;  // including this one
    for (uint32_t subset = 0; subset < (1U << m); ++subset) {
      if (std::popcount(subset) != n) continue;
      bool ok = true;
      for (int c = 0; c < m; ++c) {
        const int take = (subset >> c) & 1U;
        if (take && cap[c] == 0) ok = false;
        if (cap[c] - take > rows_left - 1) ok = false;  // column can no longer be filled
      }
      if (!ok) continue;
      for (int c = 0; c < m; ++c) cap[c] -= (subset >> c) & 1U;
      bits |= static_cast<uint64_t>(subset) << (row * m);
      dfs(row + 1);
      bits &= ~(static_cast<uint64_t>(subset) << (row * m));
      for (int c = 0; c < m; ++c) cap[c] += (subset >> c) & 1U;
    }
  }
};

}  // namespace

TileOptimum transposable_tile_bruteforce(const double* tile, int n, int m) {
  NMS_CHECK(m >= 1 && m <= 5 && n >= 1 && n <= m, "brute force needs 1 <= n <= m <= 5; got ", n,
            ":", m);
  Search s{tile, n, m, {}};
  for (int c = 0; c < m; ++c) s.cap[c] = n;
  s.dfs(0);
  return s.best;
}

}  // namespace nms::reference
