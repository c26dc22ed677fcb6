// nm_compress / nm_compress_masked / nm_decompress / nm_validate against the bit-by-bit reference
// (src/format/compress_reference.cpp) on edge shapes, every sampled pattern, both axes, special
// values and strided inputs; then the error paths.
#include "nmsparse/format/compressed_nm.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "format/compress_reference.h"
#include "format/format_test_util.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

using test::bits_of;
using test::expect_error;

// The patterns the brief asks for (m <= 64, all powers of two) plus non-power-of-two group sizes,
// which exercise index ranges smaller than 2^bits and groups straddling 64-bit mask words.
const std::vector<NmPattern> kPatterns = {{1, 1},   {1, 2},  {2, 2},  {2, 4},   {1, 4},   {3, 4},
                                          {4, 4},   {4, 8},  {3, 8},  {1, 8},   {8, 16},  {5, 16},
                                          {16, 32}, {7, 32}, {1, 64}, {32, 64}, {64, 64}, {2, 3},
                                          {3, 5},   {2, 6},  {5, 7},  {3, 12},  {17, 40}};

// Lengths of the grouped axis: m, 2m, 3m, around 64, and a few more groups.
std::vector<int64_t> axis_lengths(int m) {
  std::vector<int64_t> out = {m, 2 * m, 3 * m, 5 * m};
  const int64_t near64 = (64 / m) * m;
  if (near64 > 0) {
    out.push_back(near64);
    out.push_back(near64 + m);
  }
  if (m <= 8) out.push_back(17 * m);  // a long-ish row for the fast paths
  return out;
}

std::string describe(NmPattern p, NmAxis axis, int64_t rows, int64_t cols, int64_t extra_ld) {
  return p.to_string() + " axis " + std::string(axis_name(axis)) + " " + std::to_string(rows) +
         "x" + std::to_string(cols) + " ld+" + std::to_string(extra_ld);
}

TEST(CompressedNm, AxisNames) {
  EXPECT_EQ(axis_name(NmAxis::kRows), "rows");
  EXPECT_EQ(axis_name(NmAxis::kCols), "cols");
  EXPECT_EQ(axis_from_name("rows"), NmAxis::kRows);
  EXPECT_EQ(axis_from_name("cols"), NmAxis::kCols);
  EXPECT_EQ(axis_from_name("Rows"), std::nullopt);
  EXPECT_EQ(axis_from_name(""), std::nullopt);
}

TEST(CompressedNm, ShapesAndSizes) {
  CompressedNm c;  // kCols: value rows = dense columns, groups along the 16 rows
  c.rows = 16;
  c.cols = 12;
  c.pattern = {3, 8};
  c.axis = NmAxis::kCols;
  EXPECT_EQ(c.value_rows(), 12);
  EXPECT_EQ(c.value_cols(), 6);       // 16 / 8 * 3
  EXPECT_EQ(c.index_row_bytes(), 3);  // 6 * 3 bits = 18 bits
  EXPECT_EQ(c.index_bytes(), 36);
  c.axis = NmAxis::kRows;
  c.cols = 24;
  EXPECT_EQ(c.value_rows(), 16);
  EXPECT_EQ(c.value_cols(), 9);
  EXPECT_EQ(c.index_row_bytes(), 4);  // 27 bits
}

// The core sweep: optimised == reference (values bitwise, index bytes), valid, round trip exact.
TEST(CompressedNm, MatchesReferenceOnEdgeShapes) {
  uint64_t seed = 1;
  for (const NmPattern& p : kPatterns) {
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (int64_t other : {0, 1, 2, 7}) {
        for (int64_t len : axis_lengths(p.m)) {
          for (int64_t extra_ld : {0, 3}) {
            const int64_t rows = axis == NmAxis::kRows ? other : len;
            const int64_t cols = axis == NmAxis::kRows ? len : other;
            test::SparseOptions opt;
            opt.extra_ld = extra_ld;
            opt.special_values = (seed % 3) == 0;
            const test::TestMatrix x = test::make_nm_sparse(rows, cols, p, axis, seed++, opt);
            const std::string what = describe(p, axis, rows, cols, extra_ld);
            const CompressedNm got = nm_compress(x.view(), p, axis);
            const CompressedNm ref = reference::nm_compress_reference(x.view(), p, axis);
            test::expect_same_compressed(got, ref, what);
            EXPECT_EQ(got.values.size(), got.value_rows() * got.value_cols()) << what;
            EXPECT_EQ(got.indices.size(), got.index_bytes()) << what;
            EXPECT_NO_THROW(nm_validate(got)) << what;
            const Matrix back = nm_decompress(got);
            test::expect_bitwise_canonical(back, x, rows, cols, what + " decompress");
            const Matrix back_ref = reference::nm_decompress_reference(got);
            test::expect_bitwise_canonical(back, back_ref, rows, cols, what + " vs ref");
            // Strided destination; the padding columns must be left alone.
            std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(1, rows * (cols + 2))),
                                   -7.0f);
            nm_decompress(got, MatrixViewF(buf.data(), rows, cols, cols + 2));
            for (int64_t i = 0; i < rows; ++i) {
              for (int64_t j = 0; j < cols + 2; ++j) {
                const float y = buf[static_cast<size_t>(i * (cols + 2) + j)];
                if (j >= cols) {
                  EXPECT_EQ(y, -7.0f) << what;
                } else {
                  EXPECT_EQ(bits_of(y), bits_of(back(i, j))) << what << " strided";
                }
              }
            }
            if (::testing::Test::HasFailure()) return;  // one broken case is enough output
          }
        }
      }
    }
  }
}

TEST(CompressedNm, MaskedMatchesReference) {
  uint64_t seed = 100;
  for (const NmPattern& p : kPatterns) {
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (int64_t other : {0, 1, 3, 7}) {
        for (int64_t len : axis_lengths(p.m)) {
          const int64_t rows = axis == NmAxis::kRows ? other : len;
          const int64_t cols = axis == NmAxis::kRows ? len : other;
          const test::TestMatrix x = test::make_dense(rows, cols, seed, 2);
          const BitMask mask = test::make_nm_mask(rows, cols, p, axis, seed++);
          const std::string what = describe(p, axis, rows, cols, 2) + " masked";
          const CompressedNm got = nm_compress_masked(x.view(), mask, p, axis);
          const CompressedNm ref = reference::nm_compress_masked_reference(x.view(), mask, p, axis);
          test::expect_same_compressed(got, ref, what);
          EXPECT_NO_THROW(nm_validate(got)) << what;
          // Decompressed = dense where the mask is set, +0.0 elsewhere (padding included).
          const Matrix back = nm_decompress(got);
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j) {
              float e = mask.get(i, j) ? x.at(i, j) : 0.0f;
              if (e == 0.0f) e = 0.0f;
              ASSERT_EQ(bits_of(back(i, j)), bits_of(e)) << what << " (" << i << ", " << j << ")";
            }
          }
          // The kept mask contains the given mask plus the padding, exactly n per group.
          const BitMask kept = nm_kept_mask(got);
          EXPECT_EQ(kept.count(), got.value_rows() * got.value_cols()) << what;
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j) {
              if (mask.get(i, j)) {
                ASSERT_TRUE(kept.get(i, j)) << what;
              }
            }
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(CompressedNm, PaddingUsesLowestFreePositionsAndPositiveZero) {
  // 3:8 row: nonzeros at 2 and 6, the rest -0.0 -> padding at position 0, value +0.0.
  std::vector<float> row = {-0.0f, -0.0f, 4.0f, -0.0f, -0.0f, -0.0f, -2.0f, -0.0f};
  const CompressedNm c = nm_compress(ConstMatrixViewF(row.data(), 1, 8), {3, 8});
  ASSERT_EQ(c.values.size(), 3);
  EXPECT_EQ(c.index_at(0, 0), 0);
  EXPECT_EQ(c.index_at(0, 1), 2);
  EXPECT_EQ(c.index_at(0, 2), 6);
  EXPECT_EQ(bits_of(c.values[0]), 0u);  // +0.0, not -0.0
  EXPECT_EQ(c.values[1], 4.0f);
  EXPECT_EQ(c.values[2], -2.0f);
  EXPECT_EQ(c.dense_col_of(0, 2), 6);
  EXPECT_EQ(c.dense_row_of(0, 2), 0);
  // All-zero group: indices 0, 1, 2.
  std::vector<float> zeros(8, -0.0f);
  const CompressedNm z = nm_compress(ConstMatrixViewF(zeros.data(), 1, 8), {3, 8});
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(z.index_at(0, k), k);
    EXPECT_EQ(bits_of(z.values[k]), 0u);
  }
}

TEST(CompressedNm, NanAndInfPassThroughBitExact) {
  const float nan_payload = std::bit_cast<float>(0x7fc01234u);
  const float neg_nan = std::bit_cast<float>(0xffc00001u);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> d = {nan_payload, 0.0f, 0.0f, -inf, 0.0f, neg_nan, inf, -0.0f};
  for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
    const int64_t rows = axis == NmAxis::kRows ? 1 : 8;
    const int64_t cols = axis == NmAxis::kRows ? 8 : 1;
    const CompressedNm c = nm_compress(ConstMatrixViewF(d.data(), rows, cols), {2, 4}, axis);
    ASSERT_EQ(c.values.size(), 4);
    EXPECT_EQ(bits_of(c.values[0]), 0x7fc01234u);
    EXPECT_EQ(bits_of(c.values[1]), bits_of(-inf));
    EXPECT_EQ(bits_of(c.values[2]), 0xffc00001u);
    EXPECT_EQ(bits_of(c.values[3]), bits_of(inf));
    const Matrix back = nm_decompress(c);
    for (int64_t i = 0; i < 8; ++i) {
      float e = d[static_cast<size_t>(i)];
      if (e == 0.0f) e = 0.0f;
      EXPECT_EQ(bits_of(back.data()[i]), bits_of(e)) << i;
    }
  }
}

TEST(CompressedNm, ResultIndependentOfThreadCount) {
  for (const NmPattern& p : {NmPattern{2, 4}, NmPattern{1, 2}, NmPattern{5, 16}, NmPattern{3, 8}}) {
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      // 320 x 600 (608 for rows, which m must divide): several row chunks and several
      // 256-column tiles, the last one partial.
      const test::TestMatrix x =
          test::make_nm_sparse(320, axis == NmAxis::kRows ? 608 : 600, p, axis, 77);
      CompressedNm one;
      {
        ScopedNumThreads threads(1);
        one = nm_compress(x.view(), p, axis);
      }
      ScopedNumThreads threads(3);
      const CompressedNm many = nm_compress(x.view(), p, axis);
      test::expect_same_compressed(one, many, p.to_string());
      test::expect_same_compressed(one, reference::nm_compress_reference(x.view(), p, axis),
                                   p.to_string() + " vs reference");
      const Matrix a = nm_decompress(one);
      test::expect_bitwise_canonical(a, x, x.rows, x.cols, p.to_string());
      Matrix garbage(x.rows, x.cols);
      for (int64_t i = 0; i < garbage.size(); ++i) garbage.data()[i] = 5.0f;
      nm_decompress(many, garbage.view());
      test::expect_bitwise_canonical(garbage, x, x.rows, x.cols, p.to_string() + " into garbage");
      const BitMask mask = test::make_nm_mask(x.rows, x.cols, p, axis, 78);
      test::expect_same_compressed(nm_compress_masked(x.view(), mask, p, axis),
                                   reference::nm_compress_masked_reference(x.view(), mask, p, axis),
                                   p.to_string() + " masked vs reference");
    }
  }
}

TEST(CompressedNm, DecompressIntoOverwritesGarbage) {
  for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
    const test::TestMatrix x = test::make_nm_sparse(8, 12, {2, 4}, axis, 4);
    const CompressedNm c = nm_compress(x.view(), NmPattern{2, 4}, axis);
    Matrix dst(8, 12);
    for (int64_t i = 0; i < dst.size(); ++i) dst.data()[i] = 99.0f;
    nm_decompress(c, dst.view());
    test::expect_bitwise_canonical(dst, x, 8, 12, std::string(axis_name(axis)));
  }
}

TEST(CompressedNm, IntoReusesBuffersAndOverwritesEverything) {
  for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
    for (const NmPattern& p : {NmPattern{2, 4}, NmPattern{3, 8}, NmPattern{5, 16}}) {
      const test::TestMatrix a = test::make_nm_sparse(16, 32, p, axis, 1);
      const test::TestMatrix b = test::make_nm_sparse(16, 32, p, axis, 2);
      CompressedNm dst = nm_compress(a.view(), p, axis);
      const float* values_before = dst.values.data();
      nm_compress_into(b.view(), p, axis, dst);
      EXPECT_EQ(dst.values.data(), values_before);  // reused
      test::expect_same_compressed(dst, nm_compress(b.view(), p, axis), p.to_string());
      // Masked, then a different shape (reallocates).
      const BitMask mask = test::make_nm_mask(16, 32, p, axis, 3);
      nm_compress_masked_into(a.view(), mask, p, axis, dst);
      test::expect_same_compressed(dst, nm_compress_masked(a.view(), mask, p, axis),
                                   p.to_string() + " masked");
      const test::TestMatrix c = test::make_nm_sparse(32, 48, p, axis, 4);
      nm_compress_into(c.view(), p, axis, dst);
      test::expect_same_compressed(dst, nm_compress(c.view(), p, axis), p.to_string() + " resized");
    }
  }
}

// ---- errors ------------------------------------------------------------------------------

TEST(CompressedNmErrors, AxisLengthNotMultipleOfM) {
  std::vector<float> d(30, 0.0f);
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(d.data(), 3, 10), {2, 4});
      },
      {"nm_compress", "cols (10)", "multiple of m (4)"});
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(d.data(), 3, 10), {2, 4}, NmAxis::kCols);
      },
      {"nm_compress", "rows (3)", "multiple of m (4)", "cols"});
  BitMask mask(3, 10);
  expect_error(
      [&] {
        nm_compress_masked(ConstMatrixViewF(d.data(), 3, 10), mask, {1, 4});
      },
      {"nm_compress_masked", "cols (10)"});
}

TEST(CompressedNmErrors, InvalidPattern) {
  std::vector<float> d(16, 0.0f);
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(d.data(), 4, 4), {5, 4});
      },
      {"nm_compress", "invalid pattern 5:4"});
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(d.data(), 4, 4), {0, 4});
      },
      {"invalid pattern 0:4"});
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(d.data(), 4, 4), {1, 128});
      },
      {"invalid pattern 1:128"});
}

TEST(CompressedNmErrors, TooManyNonzerosNamesFirstRowAndGroup) {
  std::vector<float> d(6 * 16, 0.0f);
  ConstMatrixViewF v(d.data(), 6, 16);
  // Row 4 group 2 (cols 8..11) has 3 nonzeros; row 5 group 0 has 4 (later, not reported).
  d[4 * 16 + 8] = 1.0f;
  d[4 * 16 + 9] = std::numeric_limits<float>::quiet_NaN();  // NaN counts as nonzero
  d[4 * 16 + 11] = -3.0f;
  for (int j = 0; j < 4; ++j) d[5 * 16 + j] = 1.0f;
  for (int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    expect_error(
        [&] {
          nm_compress(v, {2, 4});
        },
        {"nm_compress", "row 4, group 2", "cols 8..11", "3 nonzeros", "2:4", "at most 2"});
  }
  // Generic path (m = 16) and kCols.
  expect_error([&] { nm_compress(v, {1, 16}); }, {"row 4, group 0", "3 nonzeros"});
  std::vector<float> t(16 * 6, 0.0f);  // 16 x 6, column 3 rows 4..7 get 3 nonzeros
  t[4 * 6 + 3] = 1.0f;
  t[5 * 6 + 3] = 1.0f;
  t[7 * 6 + 3] = 1.0f;
  expect_error(
      [&] {
        nm_compress(ConstMatrixViewF(t.data(), 16, 6), {2, 4}, NmAxis::kCols);
      },
      {"column 3, group 1", "rows 4..7", "3 nonzeros"});
}

TEST(CompressedNmErrors, MaskOverFullOrWrongShape) {
  std::vector<float> d(4 * 8, 1.0f);
  ConstMatrixViewF v(d.data(), 4, 8);
  BitMask mask(4, 8);
  mask.set(2, 4);
  mask.set(2, 5);
  mask.set(2, 7);
  expect_error(
      [&] {
        nm_compress_masked(v, mask, {2, 4});
      },
      {"nm_compress_masked", "mask row 2, group 1", "cols 4..7", "3 set bits"});
  BitMask col_mask(4, 8);
  col_mask.set(0, 6);
  col_mask.set(1, 6);
  expect_error(
      [&] {
        nm_compress_masked(v, col_mask, {1, 4}, NmAxis::kCols);
      },
      {"mask column 6, group 0", "2 set bits"});
  expect_error(
      [&] {
        nm_compress_masked(v, BitMask(4, 4), {2, 4});
      },
      {"nm_compress_masked", "mask shape (4 x 4)", "(4 x 8)"});
}

// A valid compressed 2:4 matrix to corrupt.
CompressedNm valid_24() {
  const test::TestMatrix x = test::make_nm_sparse(3, 16, {2, 4}, NmAxis::kRows, 5);
  return nm_compress(x.view(), NmPattern{2, 4});
}

TEST(CompressedNmValidate, AcceptsCompressorOutput) {
  EXPECT_NO_THROW(nm_validate(valid_24()));
}

TEST(CompressedNmValidate, RejectsIndexOutOfRange) {
  // 3:5 has 3-bit indices, so 5, 6, 7 are representable but invalid.
  std::vector<float> d(10, 0.0f);
  CompressedNm c = nm_compress(ConstMatrixViewF(d.data(), 1, 10), {3, 5});
  // Value row 0: slots 0..5 = 0,1,2,0,1,2. Make slot 5 (group 1, slot 2) = 7.
  // Bits 15..17: byte 1 bit 7 and byte 2 bits 0..1.
  c.indices[1] = static_cast<uint8_t>(c.indices[1] | 0x80);
  c.indices[2] = static_cast<uint8_t>(c.indices[2] | 0x03);
  expect_error([&] { nm_validate(c); },
               {"nm_validate", "value row 0, group 1, slot 2", "index 7 >= m (5)"});
  expect_error([&] { nm_decompress(c); }, {"index 7 >= m (5)"});
}

TEST(CompressedNmValidate, RejectsNonIncreasingIndices) {
  CompressedNm c = valid_24();
  // Row 1, group 0: force indices (2, 1) -> bits 0..3 of row 1's first byte = 2 | 1 << 2 = 6.
  uint8_t& b = c.indices[c.index_row_bytes()];
  b = static_cast<uint8_t>((b & 0xF0) | 0x6);
  expect_error([&] { nm_validate(c); }, {"value row 1, group 0, slot 1",
                                         "index 1 is not greater than the previous index 2"});
  b = static_cast<uint8_t>((b & 0xF0) | 0x5);  // (1, 1): duplicate
  expect_error([&] { nm_validate(c); }, {"value row 1, group 0, slot 1", "index 1"});
}

TEST(CompressedNmValidate, RejectsWrongSizes) {
  CompressedNm c = valid_24();
  CompressedNm bad_values = c;
  bad_values.values.resize(c.values.size() - 1);
  expect_error([&] { nm_validate(bad_values); }, {"values hold 23 floats", "3 x 8 = 24"});
  CompressedNm bad_indices = c;
  bad_indices.indices.resize(c.indices.size() + 1);
  expect_error([&] { nm_validate(bad_indices); }, {"indices hold 7 bytes", "= 6"});
  CompressedNm bad_shape = c;
  bad_shape.cols = 18;
  expect_error([&] { nm_validate(bad_shape); }, {"cols (18) is not a multiple of m (4)"});
  CompressedNm bad_pattern = c;
  bad_pattern.pattern = {3, 2};
  expect_error([&] { nm_validate(bad_pattern); }, {"invalid pattern 3:2"});
  CompressedNm bad_axis = c;
  bad_axis.axis = static_cast<NmAxis>(7);
  expect_error([&] { nm_validate(bad_axis); }, {"invalid axis value 7"});
  CompressedNm negative = c;
  negative.rows = -3;
  expect_error([&] { nm_validate(negative); }, {"negative dense shape"});
  Matrix wrong(3, 15);
  expect_error([&] { nm_decompress(c, wrong.view()); }, {"nm_decompress", "3 x 15", "3 x 16"});
}

TEST(CompressedNmValidate, RejectsNonzeroTrailingBits) {
  // 1:4 with 12 columns: 3 slots x 2 bits = 6 bits, bits 6..7 of each row byte unused.
  std::vector<float> d(2 * 12, 0.0f);
  CompressedNm c = nm_compress(ConstMatrixViewF(d.data(), 2, 12), {1, 4});
  ASSERT_EQ(c.index_bytes(), 2);
  c.indices[1] = static_cast<uint8_t>(c.indices[1] | 0x40);
  expect_error([&] { nm_validate(c); }, {"value row 1", "unused bits", "not zero"});
}

TEST(CompressedNmValidate, EmptyAndTrivialShapes) {
  CompressedNm c;
  EXPECT_NO_THROW(nm_validate(c));  // 0 x 0, 2:4
  const Matrix m = nm_decompress(c);
  EXPECT_EQ(m.rows(), 0);
  std::vector<float> d = {1.0f, -0.0f, 3.0f};
  const CompressedNm dense11 = nm_compress(ConstMatrixViewF(d.data(), 1, 3), {1, 1});
  EXPECT_EQ(dense11.index_bytes(), 0);
  EXPECT_EQ(dense11.values.size(), 3);
  EXPECT_EQ(bits_of(dense11.values[1]), 0u);
}

}  // namespace
}  // namespace nms
