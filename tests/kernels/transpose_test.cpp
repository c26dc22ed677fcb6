// transpose_into / transpose_mask against the element-by-element definition, every ISA level,
// sizes around the 16 x 16 (fp32) and 8 x 8 / 64-bit (mask) block edges, with and without an
// order, and 1 vs 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/kernels/transpose.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

std::vector<int64_t> make_order(int64_t rows, int kind) {
  std::vector<int64_t> order;
  if (kind == 1) {  // reversed permutation
    for (int64_t k = rows - 1; k >= 0; --k) order.push_back(k);
  } else if (kind == 2) {  // repeats and a different length
    for (int64_t k = 0; k < rows + 3; ++k) order.push_back((k * 7) % rows);
  }
  return order;
}

TEST(Transpose, MatchesDefinitionAtEveryLevelAndSize) {
  const std::vector<int64_t> sizes{1, 7, 8, 15, 16, 17, 33, 64, 65, 100, 128, 131};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (int64_t r : sizes) {
      for (int64_t c : sizes) {
        for (int kind = 0; kind < 3; ++kind) {
          SCOPED_TRACE(::testing::Message()
                       << isa_name(isa) << " " << r << "x" << c << " order " << kind);
          std::vector<float> src(static_cast<size_t>(r * (c + 3)));
          for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 3.0f;
          const ConstMatrixViewF sv(src.data(), r, c, c + 3);
          const std::vector<int64_t> order = make_order(r, kind);
          const int64_t k_len = order.empty() ? r : static_cast<int64_t>(order.size());
          std::vector<float> dst(static_cast<size_t>(c * (k_len + 2)), -1.0f);
          transpose_into(sv, MatrixViewF(dst.data(), c, k_len, k_len + 2), order);
          for (int64_t j = 0; j < c; ++j) {
            for (int64_t k = 0; k < k_len; ++k) {
              const int64_t from = order.empty() ? k : order[k];
              ASSERT_EQ(dst[j * (k_len + 2) + k], sv(from, j)) << j << "," << k;
            }
            ASSERT_EQ(dst[j * (k_len + 2) + k_len], -1.0f);  // padding untouched
          }
          BitMask mask(r, c);
          for (int64_t i = 0; i < r; ++i) {
            for (int64_t j = 0; j < c; ++j) mask.set(i, j, ((i * 31 + j * 17) % 5) < 2);
          }
          const BitMask t = transpose_mask(mask, order);
          ASSERT_EQ(t.rows(), c);
          ASSERT_EQ(t.cols(), k_len);
          BitMask want(c, k_len);
          for (int64_t j = 0; j < c; ++j) {
            for (int64_t k = 0; k < k_len; ++k)
              want.set(j, k, mask.get(order.empty() ? k : order[k], j));
          }
          ASSERT_EQ(t, want);
        }
      }
    }
  }
}

// Destinations of 8 MB and more with 64-byte aligned rows take the non-temporal store path; the
// last 16-row block and the last columns (not multiples of 16) still go through the plain stores.
TEST(Transpose, LargeAlignedDestinationMatchesDefinition) {
  const int64_t r = 1037, c = 2053;  // dst: 2053 rows of ld 1040 floats = 8.5 MB
  std::vector<float> src(static_cast<size_t>(r * c));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 100003) - 7.0f;
  const std::vector<int64_t> order = make_order(r, 1);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    SCOPED_TRACE(isa_name(isa));
    Matrix dst(c, 1040);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(dst.view().row(0)) % 64, 0u);
    for (int64_t j = 0; j < c; ++j) dst(j, r) = -1.0f;  // a padding column
    transpose_into(ConstMatrixViewF(src.data(), r, c), MatrixViewF(dst.view().row(0), c, r, 1040),
                   order);
    for (int64_t j = 0; j < c; ++j) {
      for (int64_t k = 0; k < r; ++k) ASSERT_EQ(dst(j, k), src[order[k] * c + j]) << j << "," << k;
      ASSERT_EQ(dst(j, r), -1.0f);
    }
  }
}

TEST(Transpose, SameResultOnOneAndTwoThreads) {
  const int64_t r = 300, c = 700;
  std::vector<float> src(static_cast<size_t>(r * c));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 977);
  std::vector<float> a(src.size()), b(src.size());
  {
    ScopedNumThreads one(1);
    transpose_into(ConstMatrixViewF(src.data(), r, c), MatrixViewF(a.data(), c, r));
  }
  {
    ScopedNumThreads two(2);
    transpose_into(ConstMatrixViewF(src.data(), r, c), MatrixViewF(b.data(), c, r));
  }
  EXPECT_EQ(a, b);
}

TEST(Transpose, BadArgumentsAreErrors) {
  std::vector<float> src(12), dst(12);
  const ConstMatrixViewF sv(src.data(), 3, 4);
  testing::expect_error([&] { transpose_into(sv, MatrixViewF(dst.data(), 3, 4)); },
                        "dst is 3 x 4, expected 4 x 3");
  const std::vector<int64_t> bad{0, 3};
  testing::expect_error([&] { transpose_into(sv, MatrixViewF(dst.data(), 4, 2), bad); },
                        "order[1] = 3 is outside [0, 3)");
  testing::expect_error([&] { transpose_mask(BitMask(3, 4), bad); },
                        "order[1] = 3 is outside [0, 3)");
}

// gather_columns_into against its definition: an order shorter and longer than the width, with
// repeats, strided source and destination (the padding untouched), 0 rows, 1 and 2 threads.
TEST(GatherColumns, MatchesDefinition) {
  for (const int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    for (const int64_t rows : {0, 1, 7, 64}) {
      for (const int64_t cols : {1, 5, 33}) {
        const Matrix src = testing::random_matrix(rows, cols + 2, static_cast<uint64_t>(cols));
        const ConstMatrixViewF sv(src.data(), rows, cols, cols + 2);
        for (const int64_t k_len : {int64_t{1}, cols, 2 * cols + 1}) {
          std::vector<int64_t> order(static_cast<size_t>(k_len));
          for (int64_t k = 0; k < k_len; ++k) order[static_cast<size_t>(k)] = (7 * k + 3) % cols;
          const int64_t ld = k_len + 3;
          std::vector<float> dst(static_cast<size_t>(std::max<int64_t>(rows, 1) * ld), -9.0f);
          gather_columns_into(sv, order, MatrixViewF(dst.data(), rows, k_len, ld));
          for (int64_t t = 0; t < rows; ++t) {
            for (int64_t k = 0; k < ld; ++k) {
              const float want = k < k_len ? sv(t, order[static_cast<size_t>(k)]) : -9.0f;
              ASSERT_EQ(dst[static_cast<size_t>(t * ld + k)], want)
                  << threads << " threads, " << rows << " x " << cols << ", k " << k;
            }
          }
        }
      }
    }
  }
}

TEST(GatherColumns, BadArgumentsAreErrors) {
  std::vector<float> src(12), dst(12);
  const ConstMatrixViewF sv(src.data(), 3, 4);
  const std::vector<int64_t> bad{0, 4};
  testing::expect_error([&] { gather_columns_into(sv, bad, MatrixViewF(dst.data(), 3, 2)); },
                        "order[1] = 4 is outside [0, 4)");
  const std::vector<int64_t> two{1, 0};
  testing::expect_error([&] { gather_columns_into(sv, two, MatrixViewF(dst.data(), 3, 4)); },
                        "dst is 3 x 4, expected 3 x 2");
  testing::expect_error([&] { gather_columns_into(sv, two, MatrixViewF(src.data() + 2, 3, 2, 4)); },
                        "dst overlaps src");
}

}  // namespace
}  // namespace nms
