#include "nmsparse/mask/diversity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

// Known counts (research notes §2.9, and OEIS A001499 for n = 2: 90, 297200, ...).
TEST(MaskDiversity, TransposableKnownValues) {
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(2, 4)).exact, "90");
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(1, 4)).exact, "24");  // 4! permutations
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(4, 8)).exact, "116963796250");
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(2, 8)).exact, "187530840");
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(6, 8)).exact, "187530840");  // complement
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(1, 8)).exact, "40320");      // 8!
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(2, 5)).exact, "2040");       // A001499
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(2, 6)).exact, "67950");      // A001499
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(3, 3)).exact, "1");
  EXPECT_NEAR(diversity_transposable_tile(NmPattern::make(4, 8)).log10, std::log10(116963796250.0),
              1e-9);
}

TEST(MaskDiversity, TransposableByBruteForce) {
  // All 2^(m*m) 0/1 matrices for m <= 4, counted directly.
  for (int m = 1; m <= 4; ++m) {
    for (int n = 1; n <= m; ++n) {
      int64_t count = 0;
      for (uint32_t bits = 0; bits < (1u << (m * m)); ++bits) {
        bool ok = true;
        for (int k = 0; k < m && ok; ++k) {
          int row = 0;
          int col = 0;
          for (int l = 0; l < m; ++l) {
            row += (bits >> (k * m + l)) & 1u;
            col += (bits >> (l * m + k)) & 1u;
          }
          ok = row == n && col == n;
        }
        count += ok;
      }
      EXPECT_EQ(diversity_transposable_tile(NmPattern::make(n, m)).exact, std::to_string(count))
          << n << ":" << m;
    }
  }
}

TEST(MaskDiversity, RowwiseIsBinomialPower) {
  EXPECT_EQ(diversity_rowwise_tile(NmPattern::make(2, 4)).exact, "1296");             // 6^4
  EXPECT_EQ(diversity_rowwise_tile(NmPattern::make(4, 8)).exact, "576480100000000");  // 70^8
  EXPECT_NEAR(diversity_rowwise_tile(NmPattern::make(32, 64)).log10,
              64 * std::log10(1832624140942590534.0), 1e-6);
}

TEST(MaskDiversity, LargeTilesAreRefused) {
  EXPECT_THROW(diversity_transposable_tile(NmPattern::make(16, 32)), Error);
  // The larger counts still come out (12:12 trivially, 6:12 in milliseconds).
  EXPECT_EQ(diversity_transposable_tile(NmPattern::make(12, 12)).exact, "1");
  EXPECT_NEAR(diversity_transposable_tile(NmPattern::make(6, 12)).log10, 28.8065, 1e-3);
}

}  // namespace
}  // namespace nms
