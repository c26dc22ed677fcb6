// Golden vectors for the index bit layout of docs/format.md, computed by hand. If one of these
// fails, the on-disk format changed: bump the format version instead of editing the bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "format/compress_reference.h"
#include "format/format_test_util.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {
namespace {

using test::bits_of;

struct Golden {
  const char* what;
  NmPattern pattern;
  NmAxis axis;
  int64_t rows;
  int64_t cols;
  std::vector<float> dense;
  std::vector<float> values;
  std::vector<uint8_t> indices;
};

void check(const Golden& g) {
  ConstMatrixViewF v(g.dense.data(), g.rows, g.cols);
  for (bool use_reference : {false, true}) {
    const CompressedNm c = use_reference ? reference::nm_compress_reference(v, g.pattern, g.axis)
                                         : nm_compress(v, g.pattern, g.axis);
    const char* who = use_reference ? " (reference)" : "";
    ASSERT_EQ(c.values.size(), static_cast<int64_t>(g.values.size())) << g.what << who;
    for (size_t k = 0; k < g.values.size(); ++k) {
      EXPECT_EQ(bits_of(c.values[static_cast<int64_t>(k)]), bits_of(g.values[k]))
          << g.what << who << " value " << k;
    }
    EXPECT_EQ(test::bytes_of(c.indices), g.indices) << g.what << who;
  }
}

TEST(CompressedNmLayout, TwoFourRows) {
  // Row 0: group 0 keeps {1, 3}; group 1 keeps {0} and pads with 1.
  //   slots 1, 3, 0, 1 -> 1 | 3 << 2 | 0 << 4 | 1 << 6 = 0x4D
  // Row 1: group 0 empty -> {0, 1}; group 1 keeps {0, 1}.
  //   slots 0, 1, 0, 1 -> 0x44. Every row starts on its own byte.
  check({"2:4 rows",
         {2, 4},
         NmAxis::kRows,
         2,
         8,
         {0, 5, 0, 7, 9, 0, -0.0f, 0, /**/ 0, -0.0f, 0, 0, 1, 2, 0, 0},
         {5, 7, 9, 0, /**/ 0, 0, 1, 2},
         {0x4D, 0x44}});
}

TEST(CompressedNmLayout, TwoFourCols) {
  // Dense 4 x 2, groups along columns. Value row 0 = column 0 = (0, 5, 0, 7): {1, 3} -> 0x0D.
  // Value row 1 = column 1 = (3, 0, 0, 0): {0} padded with 1 -> 0 | 1 << 2 = 0x04.
  check({"2:4 cols",
         {2, 4},
         NmAxis::kCols,
         4,
         2,
         {0, 3, 5, 0, 0, 0, 7, 0},
         {5, 7, 3, 0},
         {0x0D, 0x04}});
}

TEST(CompressedNmLayout, OneFour) {
  // Groups (0,0,3,0) (0,0,0,0) (0,0,0,-4): slots 2, 0, 3 -> 2 | 0 << 2 | 3 << 4 = 0x32; 6 bits
  // used, bits 6..7 zero.
  check({"1:4",
         {1, 4},
         NmAxis::kRows,
         1,
         12,
         {0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, -4},
         {3, 0, -4},
         {0x32}});
}

TEST(CompressedNmLayout, ThreeEight) {
  // Group 0 keeps {0, 3, 6}; group 1 keeps {7}, padded with 0 and 1 -> {0, 1, 7}.
  // 3-bit slots 0, 3, 6, 0, 1, 7 at bit offsets 0, 3, 6, 9, 12, 15:
  //   0 | 3 << 3 | 6 << 6 | 0 << 9 | 1 << 12 | 7 << 15 = 0x39198 -> bytes 98 91 03
  // (slot 2 = 6 straddles bytes 0 and 1; slot 5 = 7 straddles bytes 1 and 2).
  check({"3:8",
         {3, 8},
         NmAxis::kRows,
         1,
         16,
         {1, 0, 0, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 4},
         {1, 2, 3, 0, 0, 4},
         {0x98, 0x91, 0x03}});
}

TEST(CompressedNmLayout, FiveSixteen) {
  // Keeps {1, 2, 4, 8, 15}; 4-bit slots -> nibbles 1,2 | 4,8 | 15 -> 0x21 0x84 0x0F.
  std::vector<float> d(16, 0.0f);
  d[1] = 1;
  d[2] = 2;
  d[4] = 4;
  d[8] = 8;
  d[15] = 15;
  check({"5:16", {5, 16}, NmAxis::kRows, 1, 16, d, {1, 2, 4, 8, 15}, {0x21, 0x84, 0x0F}});
}

TEST(CompressedNmLayout, OneTwoAndOneOne) {
  // 1:2, 1-bit slots: (0,1) (2,0) (0,0) (0,-3) (5,0) (0,0) (0,0) (0,6) (7,0)
  //   -> 1,0,0,1,0,0,0,1 | 0 -> 0b10001001 = 0x89, 0x00 (bit 8 = slot 8 = 0).
  check({"1:2",
         {1, 2},
         NmAxis::kRows,
         1,
         18,
         {0, 1, 2, 0, 0, 0, 0, -3, 5, 0, 0, 0, 0, 0, 0, 6, 7, 0},
         {1, 2, 0, -3, 5, 0, 0, 6, 7},
         {0x89, 0x00}});
  // 1:1 keeps everything and stores no index bytes.
  check({"1:1", {1, 1}, NmAxis::kRows, 2, 2, {1, -0.0f, 0, 4}, {1, 0, 0, 4}, {}});
}

TEST(CompressedNmLayout, SixtyFourSixtyFour) {
  // All 64 kept: 6-bit slots 0, 1, 2, ..., 63 -> 48 bytes. First three bytes by hand:
  //   0 | 1 << 6 | 2 << 12 | 3 << 18 = 0x0C2040 -> 40 20 0C.
  std::vector<float> d(64);
  for (int i = 0; i < 64; ++i) d[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  const CompressedNm c = nm_compress(ConstMatrixViewF(d.data(), 1, 64), {64, 64});
  ASSERT_EQ(c.index_bytes(), 48);
  EXPECT_EQ(c.indices[0], 0x40);
  EXPECT_EQ(c.indices[1], 0x20);
  EXPECT_EQ(c.indices[2], 0x0C);
  // The sequence 0..63 in 6-bit LSB-first fields repeats every 4 slots = 3 bytes with +4 per
  // field: last three bytes hold 60, 61, 62, 63 = 0x3C | 0x3D << 6 | 0x3E << 12 | 0x3F << 18.
  const uint32_t tail = 0x3Cu | 0x3Du << 6 | 0x3Eu << 12 | 0x3Fu << 18;
  EXPECT_EQ(c.indices[45], tail & 0xFF);
  EXPECT_EQ(c.indices[46], (tail >> 8) & 0xFF);
  EXPECT_EQ(c.indices[47], (tail >> 16) & 0xFF);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(c.index_at(0, k), k);
}

}  // namespace
}  // namespace nms
