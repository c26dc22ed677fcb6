// Exact and greedy transposable N:M solvers, against a brute-force oracle (m <= 5) and against
// optimality / approximation properties on larger tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mask/transposable_reference.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/mask/transposable.h"
#include "testing/expect_error.h"
#include "testing/random.h"

#if NMS_HAVE_LEMON
#include "testing/lemon_tile.h"
#endif

namespace nms {
namespace {

using testing::abs_of;

// Sizes shrink under sanitizers / Debug so the suite stays fast there.
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr int kScale = 1;
#else
constexpr int kScale = 4;
#endif

// Kind 0: continuous [0, 1); 1: integers 0..3 (many ties); 2: {0, 1} (mostly ties and zeros);
// 3: all equal; 4: all zero.
Matrix make_scores(int kind, int64_t rows, int64_t cols, uint64_t seed) {
  switch (kind) {
    case 0:
      return abs_of(testing::random_matrix(rows, cols, seed));
    case 1:
      return abs_of(testing::random_integer_matrix(rows, cols, 3, seed));
    case 2:
      return abs_of(testing::random_integer_matrix(rows, cols, 1, seed));
    default: {
      Matrix a(rows, cols);
      for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = kind == 3 ? 0.75f : 0.0f;
      return a;
    }
  }
}

// Tile (ti, tj) as row-major doubles.
std::vector<double> tile_of(const Matrix& s, int m, int64_t ti, int64_t tj) {
  std::vector<double> t(static_cast<size_t>(m) * m);
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < m; ++c) t[static_cast<size_t>(r) * m + c] = s(ti * m + r, tj * m + c);
  }
  return t;
}

// Kept score of one tile of `mask`, row-major, in double.
double tile_score(const Matrix& s, const BitMask& mask, int m, int64_t ti, int64_t tj) {
  double sum = 0.0;
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < m; ++c) {
      if (mask.get(ti * m + r, tj * m + c)) sum += s(ti * m + r, tj * m + c);
    }
  }
  return sum;
}

bool tile_full(const BitMask& mask, NmPattern p, int64_t ti, int64_t tj) {
  for (int k = 0; k < p.m; ++k) {
    if (mask.count_row_range(ti * p.m + k, tj * p.m, p.m) != p.n) return false;
    if (mask.count_col_range(tj * p.m + k, ti * p.m, p.m) != p.n) return false;
  }
  return true;
}

double total(const Matrix& s) {
  double sum = 0.0;
  for (int64_t k = 0; k < s.size(); ++k) sum += s.data()[k];
  return sum;
}

bool same_stats(const TransposableStats& a, const TransposableStats& b) {
  return a.status == b.status && a.objective == b.objective && a.tiles == b.tiles &&
         a.tiles_exactly_n == b.tiles_exactly_n && a.iterations == b.iterations;
}

TEST(TransposableReference, KnownSmallCases) {
  // 1:2 on [[1, 5], [4, 1]]: the anti-diagonal.
  const double t[4] = {1, 5, 4, 1};
  const auto opt = reference::transposable_tile_bruteforce(t, 1, 2);
  EXPECT_EQ(opt.objective, 9.0);
  EXPECT_EQ(opt.bits, 0b0110U);
  // All-zero tile still returns a full pattern.
  const double z[9] = {};
  EXPECT_EQ(std::popcount(reference::transposable_tile_bruteforce(z, 2, 3).bits), 6);
}

// Exact == brute force on thousands of small tiles, every n, continuous and tied scores.
TEST(TransposableExact, MatchesBruteForceOnSmallTiles) {
  int64_t tiles_checked = 0;
  for (int m = 2; m <= 5; ++m) {
    for (int n = 1; n <= m; ++n) {
      const NmPattern p = NmPattern::make(n, m);
      for (int kind = 0; kind < 5; ++kind) {
        const int64_t tiles_across = kind < 3 ? 50 * kScale : 2;
        const uint64_t seed = static_cast<uint64_t>(1000 * m + 100 * n + kind);
        const Matrix s = make_scores(kind, 2 * m, tiles_across * m, seed);
        const TransposableResult res = mask_transposable_exact(s.view(), p);
        ASSERT_NO_THROW(check_transposable_result(s.view(), p, res, true)) << p.to_string();
        EXPECT_EQ(res.stats.status, SolveStatus::kOptimal);
        for (int64_t ti = 0; ti < 2; ++ti) {
          for (int64_t tj = 0; tj < tiles_across; ++tj) {
            const std::vector<double> t = tile_of(s, m, ti, tj);
            const double want = reference::transposable_tile_bruteforce(t.data(), n, m).objective;
            const double got = tile_score(s, res.mask, m, ti, tj);
            if (kind == 0) {
              ASSERT_NEAR(got, want, 1e-12 * std::max(1.0, want))
                  << p.to_string() << " tile " << ti << "," << tj;
            } else {
              ASSERT_EQ(got, want)
                  << p.to_string() << " kind " << kind << " tile " << ti << "," << tj;
            }
            ++tiles_checked;
          }
        }
      }
    }
  }
  EXPECT_GT(tiles_checked, 2000);
}

// 2:4: the argmax over the 90 patterns in increasing numeric order (bit 4r + c), first wins.
TEST(TransposableExact, TwoFourTiesGoToLowestPattern) {
  std::vector<uint16_t> patterns;
  for (uint32_t v = 0; v < (1U << 16); ++v) {
    bool ok = true;
    for (int k = 0; k < 4; ++k) {
      int row = 0;
      int col = 0;
      for (int l = 0; l < 4; ++l) {
        row += (v >> (4 * k + l)) & 1U;
        col += (v >> (4 * l + k)) & 1U;
      }
      ok &= row == 2 && col == 2;
    }
    if (ok) patterns.push_back(static_cast<uint16_t>(v));
  }
  ASSERT_EQ(patterns.size(), 90U);
  const Matrix s = make_scores(3, 4, 4, 0);
  const TransposableResult res = mask_transposable_exact(s.view(), NmPattern::make(2, 4));
  for (int k = 0; k < 16; ++k)
    EXPECT_EQ(res.mask.get(k / 4, k % 4), ((patterns[0] >> k) & 1U) != 0);
  EXPECT_EQ(res.stats.iterations, 0);
}

// 2:4 tiles are solved two at a time in vector lanes, an odd last tile alone: every tile must get
// the mask and the value it gets when solved on its own.
TEST(TransposableExact, TwoFourPairedTilesMatchSingleTiles) {
  for (int kind = 0; kind < 4; ++kind) {
    const Matrix s = make_scores(kind, 8, 4 * 51, static_cast<uint64_t>(70 + kind));
    const NmPattern p = NmPattern::make(2, 4);
    const TransposableResult all = mask_transposable_exact(s.view(), p);
    double objective = 0.0;
    for (int64_t ti = 0; ti < 2; ++ti) {
      for (int64_t tj = 0; tj < 51; ++tj) {
        Matrix one(4, 4);
        for (int r = 0; r < 4; ++r) {
          for (int c = 0; c < 4; ++c) one(r, c) = s(4 * ti + r, 4 * tj + c);
        }
        const TransposableResult single = mask_transposable_exact(one.view(), p);
        for (int r = 0; r < 4; ++r) {
          for (int c = 0; c < 4; ++c) {
            ASSERT_EQ(all.mask.get(4 * ti + r, 4 * tj + c), single.mask.get(r, c))
                << "kind " << kind << " tile " << ti << "," << tj;
          }
        }
        objective += single.stats.objective;
      }
    }
    EXPECT_EQ(all.stats.objective, objective) << "kind " << kind;
  }
}

// Local optimality: no 4-cycle swap (drop (i,j),(k,l), add (i,l),(k,j)) improves a tile.
void expect_no_improving_swap(const Matrix& s, const BitMask& mask, int m, int64_t ti, int64_t tj,
                              double tol) {
  const auto at = [&](int r, int c) { return static_cast<double>(s(ti * m + r, tj * m + c)); };
  const auto kept = [&](int r, int c) { return mask.get(ti * m + r, tj * m + c); };
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < m; ++j) {
      if (!kept(i, j)) continue;
      for (int k = 0; k < m; ++k) {
        if (k == i || kept(k, j)) continue;
        for (int l = 0; l < m; ++l) {
          if (l == j || !kept(k, l) || kept(i, l)) continue;
          const double gain = (at(i, l) + at(k, j)) - (at(i, j) + at(k, l));
          ASSERT_LE(gain, tol) << "improving swap in tile " << ti << "," << tj << ": (" << i << ","
                               << j << ") (" << k << "," << l << ")";
        }
      }
    }
  }
}

// Random n-regular tile mask: keep (r, c) iff (sigma(r) + tau(c)) mod m < n.
BitMask random_feasible(int64_t rows, int64_t cols, NmPattern p, uint64_t seed) {
  const int m = p.m;
  BitMask mask(rows, cols);
  const CounterRng rng(seed, 7);
  uint64_t counter = 0;
  auto perm = [&] {
    std::vector<int> v(static_cast<size_t>(m));
    for (int k = 0; k < m; ++k) v[static_cast<size_t>(k)] = k;
    for (int k = m - 1; k > 0; --k) {
      const int r = static_cast<int>(rng.uniform(counter++) * static_cast<float>(k + 1));
      std::swap(v[static_cast<size_t>(k)], v[static_cast<size_t>(std::min(r, k))]);
    }
    return v;
  };
  for (int64_t i0 = 0; i0 < rows; i0 += m) {
    for (int64_t j0 = 0; j0 < cols; j0 += m) {
      const auto sigma = perm();
      const auto tau = perm();
      for (int r = 0; r < m; ++r) {
        for (int c = 0; c < m; ++c) {
          if ((sigma[static_cast<size_t>(r)] + tau[static_cast<size_t>(c)]) % m < p.n) {
            mask.set(i0 + r, j0 + c);
          }
        }
      }
    }
  }
  return mask;
}

// Larger m: valid and full, locally optimal, >= greedy, >= random feasible masks, and the greedy
// approximation bounds hold against it.
TEST(TransposableExact, LargeTilesOptimalityProperties) {
  const NmPattern patterns[] = {{4, 8},  {1, 8},   {7, 8},   {3, 8},  {8, 16},
                                {3, 16}, {13, 16}, {16, 32}, {5, 32}, {2, 6}};
  for (const NmPattern p : patterns) {
    for (int kind = 0; kind < 3; ++kind) {
      const int m = p.m;
      const int64_t rows = 2 * m;
      const int64_t cols = (m <= 8 ? 4 * kScale : (m <= 16 ? kScale : 1)) * m;
      const Matrix s = make_scores(kind, rows, cols, static_cast<uint64_t>(p.n * 97 + m + kind));
      const TransposableResult exact = mask_transposable_exact(s.view(), p);
      ASSERT_NO_THROW(check_transposable_result(s.view(), p, exact, true)) << p.to_string();
      EXPECT_EQ(exact.stats.status, SolveStatus::kOptimal);
      EXPECT_LE(exact.stats.iterations, exact.stats.tiles * p.n * p.m);
      const double tol = kind == 0 ? 1e-9 : 0.0;
      for (int64_t ti = 0; ti < rows / m; ++ti) {
        for (int64_t tj = 0; tj < cols / m; ++tj) {
          expect_no_improving_swap(s, exact.mask, m, ti, tj, tol);
        }
      }
      const double opt = exact.stats.objective;
      const double slack = 1e-9 * std::max(1.0, opt);
      for (int k = 0; k < 20; ++k) {
        const BitMask other = random_feasible(rows, cols, p, static_cast<uint64_t>(k));
        EXPECT_LE(mask_score(s.view(), other), opt + slack);
      }
      const TransposableResult keep = mask_transposable_greedy(s.view(), p);
      const TransposableResult prune =
          mask_transposable_greedy(s.view(), p, GreedyOrder::kPruneLightFirst);
      ASSERT_NO_THROW(check_transposable_result(s.view(), p, keep, false));
      ASSERT_NO_THROW(check_transposable_result(s.view(), p, prune, false));
      EXPECT_EQ(keep.stats.status, SolveStatus::kFeasible);
      // Per tile: keep-greedy >= opt / 2; prune-greedy pruned <= 2 * (tile total - opt).
      for (int64_t ti = 0; ti < rows / m; ++ti) {
        for (int64_t tj = 0; tj < cols / m; ++tj) {
          const double t_opt = tile_score(s, exact.mask, m, ti, tj);
          const double t_keep = tile_score(s, keep.mask, m, ti, tj);
          const double t_prune = tile_score(s, prune.mask, m, ti, tj);
          double t_total = 0.0;
          for (double v : tile_of(s, m, ti, tj)) t_total += v;
          const double eps = 1e-9 * std::max(1.0, t_total);
          EXPECT_GE(t_keep, 0.5 * t_opt - eps) << p.to_string();
          EXPECT_LE(t_total - t_prune, 2.0 * (t_total - t_opt) + eps) << p.to_string();
          // The "<= n" optimum can beat the "= n" one, so greedy may score more than exact; only
          // a greedy tile that keeps exactly n everywhere is feasible for "= n" and bounded.
          if (tile_full(keep.mask, p, ti, tj)) {
            EXPECT_LE(t_keep, t_opt + eps);
          }
        }
      }
    }
  }
}

// Independent oracle: LEMON's network simplex on integer scores (exact in float and in int64);
// the objectives must be equal exactly. Scores up to 1e6 (few ties) and up to 3 (mostly ties,
// which exercises the ranked fallback of the start), m from 7 to 64 including odd m (padded
// vector lanes) and m = 64 (full 64-bit row words).
TEST(TransposableExact, MatchesLemonNetworkSimplex) {
#if NMS_HAVE_LEMON
  const NmPattern patterns[] = {{4, 8},  {3, 8}, {8, 16}, {5, 16},  {16, 32},
                                {7, 32}, {3, 7}, {4, 9},  {32, 64}, {13, 64}};
  int64_t tiles_checked = 0;
  for (const NmPattern p : patterns) {
    for (const int max_value : {1000000, 3}) {
      const int m = p.m;
      const int64_t across = (m <= 16 ? 16 : 4) * kScale;
      const Matrix s = abs_of(testing::random_integer_matrix(
          2 * m, across * m, max_value, static_cast<uint64_t>(p.n + 31 * m + max_value)));
      const TransposableResult res = mask_transposable_exact(s.view(), p);
      ASSERT_NO_THROW(check_transposable_result(s.view(), p, res, true)) << p.to_string();
      testing::LemonTileSolver lemon(p.n, m);
      for (int64_t ti = 0; ti < 2; ++ti) {
        for (int64_t tj = 0; tj < s.cols() / m; ++tj) {
          const std::vector<double> tile = tile_of(s, m, ti, tj);
          const std::vector<int64_t> costs(tile.begin(), tile.end());
          const int64_t opt = lemon.optimum(costs.data());
          ASSERT_GE(opt, 0) << "LEMON did not report OPTIMAL";
          ASSERT_EQ(tile_score(s, res.mask, m, ti, tj), static_cast<double>(opt))
              << p.to_string() << " max " << max_value << " tile " << ti << "," << tj;
          ++tiles_checked;
        }
      }
    }
  }
  EXPECT_GE(tiles_checked, 400 * kScale);
#else
  GTEST_SKIP() << "LEMON (liblemon-dev) not found at configure time";
#endif
}

TEST(TransposableGreedy, MatchesBruteForceBoundsAndIsValid) {
  for (int m = 2; m <= 5; ++m) {
    for (int n = 1; n <= m; ++n) {
      const NmPattern p = NmPattern::make(n, m);
      const Matrix s = make_scores(0, m, 40 * kScale * m, static_cast<uint64_t>(m * 10 + n));
      for (const GreedyOrder order :
           {GreedyOrder::kKeepHeavyFirst, GreedyOrder::kPruneLightFirst}) {
        const TransposableResult g = mask_transposable_greedy(s.view(), p, order);
        ASSERT_NO_THROW(check_transposable_result(s.view(), p, g, n == m));
        for (int64_t tj = 0; tj < s.cols() / m; ++tj) {
          const std::vector<double> t = tile_of(s, m, 0, tj);
          const double opt = reference::transposable_tile_bruteforce(t.data(), n, m).objective;
          double t_total = 0.0;
          for (double v : t) t_total += v;
          const double got = tile_score(s, g.mask, m, 0, tj);
          if (order == GreedyOrder::kKeepHeavyFirst) {
            EXPECT_GE(got, 0.5 * opt - 1e-12);
          } else {
            EXPECT_LE(t_total - got, 2.0 * (t_total - opt) + 1e-12);
          }
        }
      }
    }
  }
}

TEST(TransposableGreedy, TiesFollowTheDocumentedOrder) {
  const Matrix s = make_scores(3, 4, 4, 0);  // all equal
  const TransposableResult keep = mask_transposable_greedy(s.view(), NmPattern::make(2, 4));
  // Lower flat index first: rows 0 and 1 take columns 0, 1; rows 2 and 3 take columns 2, 3.
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(keep.mask.get(r, c), (r < 2) == (c < 2)) << r << c;
  }
  EXPECT_EQ(keep.stats.tiles_exactly_n, 1);
  // Prune-light-first with 1:2 on all-equal: the highest index (1,1) is pruned first, then (1,0)
  // (column 0 has none yet), then (0,1) (row 0 has none yet): the paper's "or" rule over-prunes.
  const Matrix s2 = make_scores(3, 2, 2, 0);
  const TransposableResult prune =
      mask_transposable_greedy(s2.view(), NmPattern::make(1, 2), GreedyOrder::kPruneLightFirst);
  EXPECT_TRUE(prune.mask.get(0, 0));
  EXPECT_FALSE(prune.mask.get(0, 1));
  EXPECT_FALSE(prune.mask.get(1, 0));
  EXPECT_FALSE(prune.mask.get(1, 1));
  EXPECT_EQ(prune.stats.tiles_exactly_n, 0);
}

TEST(Transposable, SameResultForAnyThreadCount) {
  const Matrix s = make_scores(0, 96, 64, 11);
  for (const NmPattern p : {NmPattern{2, 4}, NmPattern{4, 8}, NmPattern{5, 16}, NmPattern{3, 32}}) {
    TransposableResult e1, k1, p1;
    {
      ScopedNumThreads t(1);
      e1 = mask_transposable_exact(s.view(), p);
      k1 = mask_transposable_greedy(s.view(), p);
      p1 = mask_transposable_greedy(s.view(), p, GreedyOrder::kPruneLightFirst);
    }
    ScopedNumThreads t(2);
    const TransposableResult e2 = mask_transposable_exact(s.view(), p);
    const TransposableResult k2 = mask_transposable_greedy(s.view(), p);
    const TransposableResult p2 =
        mask_transposable_greedy(s.view(), p, GreedyOrder::kPruneLightFirst);
    EXPECT_EQ(e1.mask, e2.mask) << p.to_string();
    EXPECT_EQ(k1.mask, k2.mask) << p.to_string();
    EXPECT_EQ(p1.mask, p2.mask) << p.to_string();
    EXPECT_TRUE(same_stats(e1.stats, e2.stats));
    EXPECT_TRUE(same_stats(k1.stats, k2.stats));
    EXPECT_TRUE(same_stats(p1.stats, p2.stats));
  }
}

TEST(Transposable, EmptyMatrixAndKeepAll) {
  const Matrix empty(0, 0);
  const TransposableResult e = mask_transposable_exact(empty.view(), NmPattern::make(4, 8));
  EXPECT_EQ(e.stats.tiles, 0);
  const Matrix s = make_scores(0, 8, 16, 3);
  const TransposableResult all = mask_transposable_exact(s.view(), NmPattern::make(8, 8));
  EXPECT_EQ(all.mask.count(), s.size());
  EXPECT_NEAR(all.stats.objective, total(s), 1e-9);
}

using testing::expect_error;

TEST(Transposable, BadInputIsAClearError) {
  Matrix s = make_scores(0, 8, 8, 1);
  const NmPattern p = NmPattern::make(2, 4);
  for (int solver = 0; solver < 3; ++solver) {
    auto run = [&](ConstMatrixViewF v, NmPattern q) {
      if (solver == 0) return mask_transposable_exact(v, q);
      return mask_transposable_greedy(
          v, q, solver == 1 ? GreedyOrder::kKeepHeavyFirst : GreedyOrder::kPruneLightFirst);
    };
    expect_error([&] { run(s.view(), NmPattern{5, 4}); }, "exceeds group size");
    expect_error([&] { run(ConstMatrixViewF(s.data(), 8, 6), p); }, "divisible by m");
    expect_error([&] { run(ConstMatrixViewF(s.data(), 6, 8), p); }, "divisible by m");
    s(2, 5) = std::numeric_limits<float>::quiet_NaN();
    expect_error([&] { run(s.view(), p); }, "score (2, 5)");
    s(2, 5) = -1.0f;
    expect_error([&] { run(s.view(), p); }, "finite and non-negative");
    s(2, 5) = std::numeric_limits<float>::infinity();
    expect_error([&] { run(s.view(), p); }, "finite and non-negative");
    s(2, 5) = 0.5f;
  }
}

}  // namespace
}  // namespace nms
