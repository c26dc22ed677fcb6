// sparse-24-bitmask import/export against the compressed-tensors package's own outputs
// (tests/data/sparse24, written by scripts/make_golden_sparse24.py), plus round trips and errors.
#include "nmsparse/format/sparse24_bitmask.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/format_test_util.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {
namespace {

using test::bits_of;
using test::expect_error;

const std::string kDir = std::string(NMS_TEST_DATA_DIR) + "/sparse24/";

template <class T>
std::vector<T> read_bin(const std::string& path, size_t count) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<T> out(count);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * sizeof(T)));
  EXPECT_EQ(static_cast<size_t>(f.gcount()), count * sizeof(T)) << path << " is short";
  EXPECT_EQ(f.peek(), std::char_traits<char>::eof()) << path << " is longer than expected";
  return out;  // little-endian host assumed (x86-64, aarch64)
}

struct GoldenCase {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
  bool prune = false;
};

std::vector<GoldenCase> read_manifest() {
  std::ifstream f(kDir + "manifest.txt");
  EXPECT_TRUE(f.good()) << "missing " << kDir << "manifest.txt";
  std::vector<GoldenCase> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    GoldenCase c;
    std::string mode;
    is >> c.name >> c.rows >> c.cols >> mode;
    EXPECT_TRUE(mode == "sparse" || mode == "prune") << line;
    c.prune = mode == "prune";
    out.push_back(c);
  }
  return out;
}

TEST(Sparse24Golden, MatchesCompressedTensorsBothWays) {
  const auto cases = read_manifest();
  ASSERT_GE(cases.size(), 5u);
  for (const GoldenCase& g : cases) {
    const auto n = static_cast<size_t>(g.rows * g.cols);
    const auto dense = read_bin<float>(kDir + g.name + ".dense.bin", n);
    const auto compressed = read_bin<float>(kDir + g.name + ".compressed.bin", n / 2);
    const auto bitmask = read_bin<uint8_t>(kDir + g.name + ".bitmask.bin",
                                           static_cast<size_t>(g.rows * ((g.cols + 7) / 8)));
    const auto decompressed = read_bin<float>(kDir + g.name + ".decompressed.bin", n);

    // Export: ours == the package's, bit for bit.
    const Sparse24Mode mode = g.prune ? Sparse24Mode::kPruneTopTwo : Sparse24Mode::kRequireSparse;
    const Sparse24Bitmask s =
        sparse24_from_dense(ConstMatrixViewF(dense.data(), g.rows, g.cols), mode);
    EXPECT_EQ(s.rows, g.rows);
    EXPECT_EQ(s.cols, g.cols);
    ASSERT_EQ(s.compressed.size(), compressed.size()) << g.name;
    for (size_t k = 0; k < compressed.size(); ++k) {
      EXPECT_EQ(bits_of(s.compressed[k]), bits_of(compressed[k])) << g.name << " value " << k;
    }
    EXPECT_EQ(s.bitmask, bitmask) << g.name;
    if (g.prune) {
      expect_error([&] { sparse24_from_dense(ConstMatrixViewF(dense.data(), g.rows, g.cols)); },
                   {"sparse24_from_dense", "nonzeros", "kPruneTopTwo"});
    }

    // Import: the package's arrays -> ours == the package's decompression, bit for bit.
    Sparse24Bitmask in;
    in.rows = g.rows;
    in.cols = g.cols;
    in.compressed = compressed;
    in.bitmask = bitmask;
    const Matrix d = sparse24_to_dense(in);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(bits_of(d.data()[k]), bits_of(decompressed[k])) << g.name << " element " << k;
    }
    const BitMask mask = sparse24_mask(in);
    EXPECT_EQ(mask.count(), static_cast<int64_t>(n / 2)) << g.name;
  }
}

TEST(Sparse24, RoundTripsRandomTwoFourSparse) {
  for (int64_t rows : {1, 2, 5}) {
    for (int64_t cols : {4, 8, 12, 36, 64, 68}) {
      test::SparseOptions opt;
      opt.extra_ld = 3;
      opt.special_values = true;
      const test::TestMatrix x =
          test::make_nm_sparse(rows, cols, {2, 4}, NmAxis::kRows, rows * 100 + cols, opt);
      const Sparse24Bitmask s = sparse24_from_dense(x.view());
      ASSERT_EQ(static_cast<int64_t>(s.compressed.size()), rows * cols / 2);
      ASSERT_EQ(static_cast<int64_t>(s.bitmask.size()), rows * ((cols + 7) / 8));
      const Matrix d = sparse24_to_dense(s);
      // Kept values come back bit-exact (a kept -0.0 stays -0.0); unkept ones are +0.0, so the
      // comparison is modulo the sign of zero.
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const float e = x.at(i, j);
          if (e == 0.0f) {
            EXPECT_EQ(d(i, j), 0.0f);
          } else {
            EXPECT_EQ(bits_of(d(i, j)), bits_of(e)) << i << " " << j;
          }
        }
      }
      // Re-pack the same kept set into the nmsparse format: same dense matrix.
      const CompressedNm c = nm_compress_masked(x.view(), sparse24_mask(s), {2, 4});
      const Matrix back = nm_decompress(c);
      test::expect_bitwise_canonical(back, d, rows, cols, "via nm_compress_masked");
      // Every row of `compressed` holds that row's values when cols % 4 == 0.
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t k = 0; k < cols / 2; ++k) {
          float v = s.compressed[static_cast<size_t>(i * (cols / 2) + k)];
          if (v == 0.0f) v = 0.0f;  // nmsparse stores a kept -0.0 as +0.0, the package does not
          EXPECT_EQ(bits_of(v), bits_of(c.values[i * (cols / 2) + k])) << "row " << i;
        }
      }
    }
  }
}

TEST(Sparse24, ExportErrors) {
  std::vector<float> d(24, 0.0f);
  expect_error([&] { sparse24_from_dense(ConstMatrixViewF(d.data(), 3, 5)); },
               {"sparse24_from_dense", "cols (5) must be even"});
  expect_error([&] { sparse24_from_dense(ConstMatrixViewF(d.data(), 3, 6)); },
               {"rows * cols (3 * 6)", "multiple of 4"});
  d[1 * 8 + 4] = 1.0f;
  d[1 * 8 + 5] = 2.0f;
  d[1 * 8 + 6] = 3.0f;
  expect_error([&] { sparse24_from_dense(ConstMatrixViewF(d.data(), 3, 8)); },
               {"group 3 (row 1, cols 4..7)", "3 nonzeros", "at most 2"});
  EXPECT_NO_THROW(
      sparse24_from_dense(ConstMatrixViewF(d.data(), 3, 8), Sparse24Mode::kPruneTopTwo));
}

Sparse24Bitmask valid_import() {
  const test::TestMatrix x = test::make_nm_sparse(3, 12, {2, 4}, NmAxis::kRows, 8);
  return sparse24_from_dense(x.view());
}

TEST(Sparse24, ImportErrors) {
  EXPECT_NO_THROW(sparse24_validate(valid_import()));
  {
    Sparse24Bitmask s = valid_import();
    s.compressed.pop_back();
    expect_error([&] { sparse24_to_dense(s); },
                 {"sparse24_validate", "compressed holds 17 values", "3 x 6 = 18"});
  }
  {
    Sparse24Bitmask s = valid_import();
    s.bitmask.push_back(0);
    expect_error([&] { sparse24_to_dense(s); }, {"bitmask holds 7 bytes", "3 x 2 = 6"});
  }
  {
    Sparse24Bitmask s = valid_import();
    s.bitmask[2 * 2 + 1] |= 0x10;  // row 2, column 12: padding
    expect_error([&] { sparse24_to_dense(s); }, {"bitmask row 2", "padding bits after column 11"});
  }
  {
    Sparse24Bitmask s = valid_import();
    s.bitmask[1 * 2] = 0x07;  // row 1, group 0: 3 bits; group 1: 0 bits
    expect_error([&] { sparse24_to_dense(s); },
                 {"bitmask group 3 (row 1, cols 0..3)", "3 set bits", "exactly 2"});
  }
  {
    Sparse24Bitmask s = valid_import();
    s.cols = 7;
    expect_error([&] { sparse24_mask(s); }, {"cols (7) must be even"});
  }
}

TEST(Sparse24, StraddlingGroupsFollowTheFlattenedOrder) {
  // cols % 4 == 2: the package groups the flattened tensor; group 1 = row 0 cols 4..5 + row 1
  // cols 0..1. Row 0 keeps 4 values here, so compressed "row 0" holds row 0's 3 first kept values.
  std::vector<float> d = {1, 0, 2, 0, 3, -4, /**/ 0, 0, 0, 0, 5, 0};
  const Sparse24Bitmask s = sparse24_from_dense(ConstMatrixViewF(d.data(), 2, 6));
  EXPECT_EQ(s.compressed, (std::vector<float>{1, 2, 3, -4, 5, 0}));
  // Row 0: bits 0, 2, 4, 5 -> 0x35; row 1: group 2 = cols 2..5 keeps col 4 and (tie) col 5.
  EXPECT_EQ(s.bitmask, (std::vector<uint8_t>{0x35, 0x30}));
  const Matrix back = sparse24_to_dense(s);
  for (size_t k = 0; k < d.size(); ++k) EXPECT_EQ(back.data()[k], d[k]);
  std::vector<float> bad = {1, 0, 2, 0, 3, 4, /**/ 5, 0, 0, 0, 0, 0};
  expect_error([&] { sparse24_from_dense(ConstMatrixViewF(bad.data(), 2, 6)); },
               {"group 1 (flattened elements 4..7, from row 0, col 4)", "3 nonzeros"});
}

TEST(Sparse24, EmptyMatrix) {
  const Sparse24Bitmask s = sparse24_from_dense(ConstMatrixViewF(nullptr, 0, 8));
  EXPECT_TRUE(s.compressed.empty());
  EXPECT_TRUE(s.bitmask.empty());
  EXPECT_EQ(sparse24_to_dense(s).rows(), 0);
}

}  // namespace
}  // namespace nms
