#include "nmsparse/core/bit_mask.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "nmsparse/core/isa.h"
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

// Rows to bytes and back at every level, against get(): widths around the 64-bit words, a row
// range that starts inside the mask, a row stride past the width (its padding bytes untouched),
// and bytes other than 1 reading as set.
TEST(BitMask, RowsToBytesAndBack) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (int64_t cols : {1, 7, 8, 9, 63, 64, 65, 127, 128, 200}) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " cols " << cols);
      const int64_t rows = 5;
      const int64_t ld = cols + 13;
      BitMask mask(rows, cols);
      const CounterRng rng(static_cast<uint64_t>(cols), 3);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) mask.set(i, j, rng.uniform(i * cols + j) < 0.4);
      }
      std::vector<uint8_t> bytes(static_cast<size_t>(rows * ld), 0xAB);
      bit_mask_rows_to_bytes(mask, 1, rows, bytes.data() + ld, ld);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < ld; ++j) {
          const uint8_t want = i == 0 || j >= cols ? 0xAB : (mask.get(i, j) ? 1 : 0);
          ASSERT_EQ(bytes[i * ld + j], want) << "row " << i << " col " << j;
        }
      }
      // Any nonzero byte is a set bit; the padding bytes past cols are ignored.
      for (int64_t i = 1; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          uint8_t& b = bytes[i * ld + j];
          if (b != 0) b = static_cast<uint8_t>(1 + (i * 31 + j * 7) % 255);
        }
      }
      BitMask back(rows, cols);
      back.fill(true);  // rows 1.. are overwritten, row 0 is kept
      bit_mask_rows_from_bytes(bytes.data() + ld, ld, 1, rows, back);
      for (int64_t i = 1; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          ASSERT_EQ(back.get(i, j), mask.get(i, j)) << "row " << i << " col " << j;
        }
      }
      EXPECT_EQ(back.count_row(0), cols);
      EXPECT_EQ(back.count(), cols + mask.count() - mask.count_row(0));  // no padding bits set
    }
  }
}

}  // namespace
}  // namespace nms
