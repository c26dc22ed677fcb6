#include "nmsparse/mask/verify.h"

#include <gtest/gtest.h>

#include "nmsparse/core/rng.h"
#include "nmsparse/mask/standard.h"
#include "testing/random.h"

namespace nms {
namespace {

// Brute-force counts straight from the definition, element by element.
struct Counts {
  int64_t row_violations = 0, col_violations = 0, tile_violations = 0, kept = 0;
};

Counts brute_force(const BitMask& k, int n, int m) {
  Counts c;
  c.kept = k.count();
  for (int64_t i = 0; i < k.rows(); ++i) {
    for (int64_t j0 = 0; j0 + m <= k.cols() && k.cols() % m == 0; j0 += m) {
      int cnt = 0;
      for (int64_t j = j0; j < j0 + m; ++j) cnt += k.get(i, j);
      c.row_violations += cnt > n;
    }
  }
  for (int64_t j = 0; j < k.cols(); ++j) {
    for (int64_t i0 = 0; i0 + m <= k.rows() && k.rows() % m == 0; i0 += m) {
      int cnt = 0;
      for (int64_t i = i0; i < i0 + m; ++i) cnt += k.get(i, j);
      c.col_violations += cnt > n;
    }
  }
  if (k.rows() % m == 0 && k.cols() % m == 0) {
    for (int64_t i0 = 0; i0 < k.rows(); i0 += m) {
      for (int64_t j0 = 0; j0 < k.cols(); j0 += m) {
        bool bad = false;
        for (int64_t a = 0; a < m; ++a) {
          int r = 0, col = 0;
          for (int64_t b = 0; b < m; ++b) {
            r += k.get(i0 + a, j0 + b);
            col += k.get(i0 + b, j0 + a);
          }
          bad |= r > n || col > n;
        }
        c.tile_violations += bad;
      }
    }
  }
  return c;
}

TEST(VerifyNm, MatchesBruteForceOnRandomMasks) {
  for (const NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{3, 8}, NmPattern{4, 5},
                            NmPattern{5, 16}, NmPattern{30, 64}, NmPattern{2, 3}}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {p.m, p.m}, {2 * p.m, 3 * p.m}, {3 * p.m + 1, 2 * p.m}, {p.m, 130 / p.m * p.m}}) {
      for (const float density : {0.3f, 0.5f, 0.8f}) {
        BitMask k(rows, cols);
        const CounterRng rng(3, static_cast<uint64_t>(rows * cols * p.m));
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) k.set(i, j, rng.uniform(i * cols + j) < density);
        const NmVerifyReport r = verify_nm(k, p);
        const Counts want = brute_force(k, p.n, p.m);
        EXPECT_EQ(r.kept, want.kept);
        EXPECT_EQ(r.row_violations, want.row_violations)
            << p.to_string() << " " << rows << "x" << cols;
        EXPECT_EQ(r.col_violations, want.col_violations)
            << p.to_string() << " " << rows << "x" << cols;
        EXPECT_EQ(r.tile_violations, want.tile_violations) << p.to_string();
        EXPECT_EQ(r.rows_applicable, cols % p.m == 0);
        EXPECT_EQ(r.cols_applicable, rows % p.m == 0);
        EXPECT_EQ(r.transposable_valid(), r.tiles_applicable && want.tile_violations == 0);
      }
    }
  }
}

TEST(VerifyNm, StandardMaskIsRowValidNotTransposable) {
  const Matrix w = testing::random_matrix(64, 64, 9);
  const NmPattern p = NmPattern::make(2, 4);
  const BitMask mask = mask_nm_magnitude(w.view(), p);
  const NmVerifyReport r = verify_nm(mask, p);
  EXPECT_TRUE(r.rows_valid());
  EXPECT_EQ(r.row_groups, 64 * 16);
  EXPECT_EQ(r.row_groups_full, r.row_groups);
  EXPECT_DOUBLE_EQ(r.density(), 0.5);
  EXPECT_GT(r.col_violations, 0);  // random weights: columns are not 2:4
  EXPECT_FALSE(r.transposable_valid());
  EXPECT_GE(r.first_col_violation.row, 0);
  EXPECT_GT(r.first_col_violation.kept, 2);
}

TEST(VerifyNm, FirstViolationLocation) {
  BitMask k(4, 8);
  k.set(1, 4);
  k.set(1, 5);
  k.set(1, 7);
  const NmVerifyReport r = verify_nm(k, NmPattern::make(2, 4));
  EXPECT_EQ(r.row_violations, 1);
  EXPECT_EQ(r.first_row_violation.row, 1);
  EXPECT_EQ(r.first_row_violation.col, 4);
  EXPECT_EQ(r.first_row_violation.kept, 3);
  EXPECT_TRUE(r.cols_valid());
  EXPECT_EQ(r.tile_violations, 1);
}

TEST(VerifyNm, WeightsNegativeZeroIsPruned) {
  const float w[4] = {-0.0f, 0.0f, 1.0f, -2.0f};
  const NmVerifyReport r = verify_nm(ConstMatrixViewF(w, 1, 4), NmPattern::make(2, 4));
  EXPECT_EQ(r.kept, 2);
  EXPECT_TRUE(r.rows_valid());
}

TEST(KeptMassFraction, Definition) {
  const float w[4] = {1.0f, -3.0f, 0.0f, 4.0f};
  BitMask k(1, 4);
  k.set(0, 1);
  k.set(0, 3);
  EXPECT_DOUBLE_EQ(kept_mass_fraction(ConstMatrixViewF(w, 1, 4), k), 7.0 / 8.0);
  const float zeros[2] = {0.0f, 0.0f};
  EXPECT_DOUBLE_EQ(kept_mass_fraction(ConstMatrixViewF(zeros, 1, 2), BitMask(1, 2)), 1.0);
  EXPECT_THROW(kept_mass_fraction(ConstMatrixViewF(w, 1, 4), BitMask(2, 2)), Error);
}

}  // namespace
}  // namespace nms
