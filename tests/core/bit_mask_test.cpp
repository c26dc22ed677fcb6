#include "nmsparse/core/bit_mask.h"

#include <gtest/gtest.h>

#include <vector>

#include "nmsparse/core/rng.h"

namespace nms {
namespace {

// Counts from a plain bool matrix are the reference for the packed counts.
TEST(BitMask, CountsMatchBoolReference) {
  for (const auto& [rows, cols] :
       std::vector<std::pair<int, int>>{{1, 1}, {3, 63}, {5, 64}, {7, 65}, {16, 130}, {33, 200}}) {
    BitMask mask(rows, cols);
    std::vector<std::vector<bool>> ref(rows, std::vector<bool>(cols));
    const CounterRng rng(42, rows * 1000 + cols);
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < cols; ++j) {
        const bool bit = rng.uniform(i * cols + j) < 0.4f;
        mask.set(i, j, bit);
        ref[i][j] = bit;
      }
    }
    int64_t total = 0;
    for (int i = 0; i < rows; ++i) {
      int64_t row_count = 0;
      for (int j = 0; j < cols; ++j) row_count += ref[i][j];
      EXPECT_EQ(mask.count_row(i), row_count);
      total += row_count;
      for (int j0 = 0; j0 < cols; j0 += 3) {
        for (int len : {0, 1, 5, 64, 70}) {
          if (j0 + len > cols) continue;
          int64_t c = 0;
          for (int j = j0; j < j0 + len; ++j) c += ref[i][j];
          EXPECT_EQ(mask.count_row_range(i, j0, len), c) << i << " " << j0 << " " << len;
        }
      }
    }
    EXPECT_EQ(mask.count(), total);
    for (int j = 0; j < cols; ++j) {
      int64_t c = 0;
      for (int i = 0; i < rows; ++i) c += ref[i][j];
      EXPECT_EQ(mask.count_col(j), c);
    }
    if (rows >= 4 && cols >= 4) {
      int64_t c = 0;
      for (int i = 1; i < 4; ++i)
        for (int j = 2; j < 4; ++j) c += ref[i][j];
      EXPECT_EQ(mask.count_tile(1, 2, 3, 2), c);
    }
  }
}

TEST(BitMask, FillKeepsPaddingZero) {
  BitMask mask(3, 70);
  mask.fill(true);
  EXPECT_EQ(mask.count(), 3 * 70);
  EXPECT_EQ(mask.row_words(0)[1], (uint64_t{1} << 6) - 1);
  mask.set(1, 69, false);
  EXPECT_EQ(mask.count_row(1), 69);
  mask.fill(false);
  EXPECT_EQ(mask.count(), 0);
}

TEST(BitMask, EmptyShapes) {
  BitMask a(0, 10);
  BitMask b(4, 0);
  EXPECT_EQ(a.count(), 0);
  EXPECT_EQ(b.count_row(2), 0);
  EXPECT_THROW(BitMask(-1, 3), Error);
}

}  // namespace
}  // namespace nms
