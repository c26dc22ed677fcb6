// The host-device exact tile solvers (mask/transposable_tile.h, what the CUDA backend runs per
// GPU thread) against the CPU solver, on the host, over more patterns than the GPU-thread tests
// of tests/cuda/kernel_bodies_test.cpp (which also cover greedy): same masks where the problem
// fixes them, the same optimum everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mask/transposable_tile.h"
#include "nmsparse/mask/transposable.h"
#include "testing/random.h"

namespace nms {
namespace {

using testing::abs_of;

// Runs tile(a, ld, keep) on every m x m tile and assembles the mask.
template <class Tile>
BitMask solve_by_tiles(const Matrix& s, int m, Tile&& tile) {
  BitMask mask(s.rows(), s.cols());
  std::vector<uint64_t> keep(static_cast<size_t>(m));
  for (int64_t i0 = 0; i0 < s.rows(); i0 += m) {
    for (int64_t j0 = 0; j0 < s.cols(); j0 += m) {
      tile(s.view().row(i0) + j0, s.view().ld(), keep.data());
      for (int r = 0; r < m; ++r) {
        for (int c = 0; c < m; ++c) {
          if ((keep[static_cast<size_t>(r)] >> c) & 1) mask.set(i0 + r, j0 + c);
        }
      }
    }
  }
  return mask;
}

// Checks validity (<= n, or == n) per tile row and column, independently of the solver.
void expect_valid(const Matrix& s, NmPattern p, const BitMask& mask, bool exactly_n) {
  TransposableResult r;
  r.mask = mask;
  r.stats.objective = mask_score(s.view(), mask);
  int64_t full = 0;
  for (int64_t i0 = 0; i0 < s.rows(); i0 += p.m) {
    for (int64_t j0 = 0; j0 < s.cols(); j0 += p.m) {
      bool all = true;
      for (int k = 0; k < p.m; ++k) {
        all &= mask.count_row_range(i0 + k, j0, p.m) == p.n &&
               mask.count_col_range(j0 + k, i0, p.m) == p.n;
      }
      full += all;
    }
  }
  r.stats.tiles = (s.rows() / p.m) * (s.cols() / p.m);
  r.stats.tiles_exactly_n = full;
  check_transposable_result(s.view(), p, r, exactly_n);
}

enum class Scores { kContinuous, kIntegerTies, kZeroOne };

Matrix scores(int64_t rows, int64_t cols, Scores kind, uint64_t seed) {
  switch (kind) {
    case Scores::kContinuous:
      return abs_of(testing::random_matrix(rows, cols, seed));
    case Scores::kIntegerTies:
      return abs_of(testing::random_integer_matrix(rows, cols, 3, seed));
    case Scores::kZeroOne:
      return abs_of(testing::random_integer_matrix(rows, cols, 1, seed));
  }
  return {};
}

TEST(TransposableTile, Exact24EqualsTheCpuSolverIncludingTies) {
  for (Scores kind : {Scores::kContinuous, Scores::kIntegerTies, Scores::kZeroOne}) {
    const Matrix s = scores(64, 96, kind, 11 + static_cast<uint64_t>(kind));
    const NmPattern p = NmPattern::make(2, 4);
    const BitMask mine = solve_by_tiles(s, 4, [](const float* a, int64_t ld, uint64_t* keep) {
      const uint64_t bits = detail::exact_tile_2_4(a, ld);
      for (int r = 0; r < 4; ++r) keep[r] = (bits >> (4 * r)) & 0xF;
    });
    const TransposableResult cpu = mask_transposable_exact(s.view(), p);
    EXPECT_TRUE(mine == cpu.mask) << "scores kind " << static_cast<int>(kind);
    expect_valid(s, p, mine, true);
  }
  const Matrix zero(8, 8);  // all-zero tiles: the first pattern, as on the CPU
  const BitMask mine = solve_by_tiles(zero, 4, [](const float* a, int64_t ld, uint64_t* keep) {
    const uint64_t bits = detail::exact_tile_2_4(a, ld);
    for (int r = 0; r < 4; ++r) keep[r] = (bits >> (4 * r)) & 0xF;
  });
  EXPECT_TRUE(mine == mask_transposable_exact(zero.view(), NmPattern::make(2, 4)).mask);
}

// The flow solver reaches the CPU's certified optimum for every pattern; on continuous scores
// the optimum is unique (ties have probability ~0 at 24-bit resolution), so the masks are equal.
TEST(TransposableTile, ExactFlowMatchesTheCpuOptimum) {
  const int patterns[][2] = {{1, 2},  {1, 4},  {2, 4},   {3, 4},   {4, 8},   {3, 7}, {5, 12},
                             {8, 16}, {1, 16}, {15, 16}, {16, 32}, {20, 64}, {4, 4}};
  for (const auto& nm : patterns) {
    const NmPattern p = NmPattern::make(nm[0], nm[1]);
    const int64_t tiles = p.m >= 32 ? 2 : 4;
    for (Scores kind : {Scores::kContinuous, Scores::kIntegerTies, Scores::kZeroOne}) {
      const Matrix s = scores(tiles * p.m, (tiles + 1) * p.m, kind, 100 + p.m * 7 + p.n);
      int augmentations = 0;
      const BitMask mine = solve_by_tiles(s, p.m, [&](const float* a, int64_t ld, uint64_t* keep) {
        const int aug = detail::exact_tile_flow<64>(a, ld, p.n, p.m, keep);
        ASSERT_GE(aug, 0);
        augmentations += aug;
      });
      const TransposableResult cpu = mask_transposable_exact(s.view(), p);
      SCOPED_TRACE(::testing::Message() << p.n << ":" << p.m << " kind " << static_cast<int>(kind));
      expect_valid(s, p, mine, true);
      const double ours = mask_score(s.view(), mine);
      EXPECT_NEAR(ours, cpu.stats.objective, 1e-9 * std::fabs(cpu.stats.objective));
      if (kind == Scores::kContinuous) {
        EXPECT_TRUE(mine == cpu.mask);
      }
      if (kind == Scores::kIntegerTies) {
        EXPECT_EQ(ours, cpu.stats.objective);  // integer sums are exact
      }
    }
  }
}

// A fault in the augmentation (e.g. dropping the potential update) leaves a suboptimal mask:
// the comparison above can fail. Here: the row-wise start alone is worse on 8:16.
TEST(TransposableTile, ExactFlowStartAloneIsNotOptimal) {
  const NmPattern p = NmPattern::make(8, 16);
  const Matrix s = scores(64, 64, Scores::kContinuous, 5);
  int total = 0;
  solve_by_tiles(s, 16, [&](const float* a, int64_t ld, uint64_t* keep) {
    total += detail::exact_tile_flow<16>(a, ld, p.n, p.m, keep);
  });
  EXPECT_GT(total, 0);  // the start is not already feasible, so the augmentations did work
}

}  // namespace
}  // namespace nms
