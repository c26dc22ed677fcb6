// mask_nm_vectorwise: every row N:M, rows of a block identical, the kept columns of each (block,
// group) the top n of the block sums (checked against a plain computation), block_rows = 1 equal
// to the row-wise mask, errors.
#include "nmsparse/mask/vectorwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "nmsparse/mask/standard.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

Matrix abs_scores(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix s = testing::random_matrix(rows, cols, seed);
  for (int64_t k = 0; k < s.size(); ++k) s.data()[k] = std::fabs(s.data()[k]);
  return s;
}

TEST(VectorwiseMask, BlocksShareTheTopNOfTheirSums) {
  for (NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{3, 8}}) {
    for (int64_t block : {1, 6, 7, 64}) {
      const Matrix s = abs_scores(50, 48, static_cast<uint64_t>(block * 10 + p.n));
      const BitMask mask = mask_nm_vectorwise(s.view(), p, block);
      for (int64_t i = 0; i < s.rows(); ++i) {
        const int64_t b0 = i / block * block;
        for (int64_t g = 0; g < s.cols() / p.m; ++g) {
          // Plain top n of the block sums, ties to the lower column.
          std::vector<std::pair<double, int64_t>> sums;
          for (int64_t j = g * p.m; j < (g + 1) * p.m; ++j) {
            double sum = 0.0;
            for (int64_t r = b0; r < std::min(s.rows(), b0 + block); ++r) sum += s(r, j);
            sums.push_back({-static_cast<double>(static_cast<float>(sum)), j});
          }
          std::sort(sums.begin(), sums.end());
          for (int k = 0; k < p.m; ++k) {
            EXPECT_EQ(mask.get(i, sums[static_cast<size_t>(k)].second), k < p.n)
                << p.to_string() << " block " << block << " row " << i << " group " << g;
          }
        }
      }
    }
  }
}

TEST(VectorwiseMask, OneRowBlocksAreTheRowWiseMask) {
  const Matrix s = abs_scores(9, 32, 3);
  const BitMask a = mask_nm_vectorwise(s.view(), {2, 4}, 1);
  const BitMask b = mask_nm_rows(s.view(), {2, 4});
  for (int64_t i = 0; i < s.rows(); ++i)
    for (int64_t j = 0; j < s.cols(); ++j) EXPECT_EQ(a.get(i, j), b.get(i, j));
}

TEST(VectorwiseMask, Errors) {
  Matrix s = abs_scores(4, 8, 1);
  testing::expect_error([&] { mask_nm_vectorwise(s.view(), {2, 4}, 0); }, "block_rows (0)");
  testing::expect_error([&] { mask_nm_vectorwise(s.view(), {2, 3}, 2); }, "not a multiple of m");
  s(2, 5) = -1.0f;
  testing::expect_error([&] { mask_nm_vectorwise(s.view(), {2, 4}, 2); }, "score (2, 5)");
  s(2, 5) = std::numeric_limits<float>::quiet_NaN();
  testing::expect_error([&] { mask_nm_vectorwise(s.view(), {2, 4}, 2); }, "score (2, 5)");
}

}  // namespace
}  // namespace nms
