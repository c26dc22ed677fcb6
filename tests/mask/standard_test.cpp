#include "nmsparse/mask/standard.h"
#include "nmsparse/core/isa.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mask/standard_reference.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/mask/verify.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

const NmPattern kPatterns[] = {{1, 1},  {1, 2},   {2, 4},   {1, 4},  {3, 4},  {4, 8},
                               {3, 8},  {2, 3},   {5, 16},  {8, 16}, {7, 24}, {16, 32},
                               {1, 64}, {32, 64}, {64, 64}, {5, 7}};

// The optimised mask equals the sort-based reference on every pattern, on continuous values and
// on integer values with many ties (where only the lower-index rule decides).
TEST(MaskNmRows, MatchesReferenceOnEdgeShapes) {
  for (const NmPattern p : kPatterns) {
    for (const int64_t rows : {0, 1, 2, 17}) {
      for (const int64_t groups : {1, 2, 3, 65}) {
        const int64_t cols = groups * p.m;
        for (int ties = 0; ties < 2; ++ties) {
          const uint64_t seed = static_cast<uint64_t>(rows * 1000 + cols * 7 + ties);
          Matrix w = ties ? testing::random_integer_matrix(rows, cols, 2, seed)
                          : testing::random_matrix(rows, cols, seed);
          // Below AVX-512, groups of 4 take the SSE2 kernel.
          BitMask got;
          for (Isa isa : {Isa::kScalar, Isa::kAvx512}) {
            if (isa > isa_supported()) continue;
            ScopedIsa scoped(isa);
            const BitMask at_level = mask_nm_magnitude(w.view(), p);
            if (isa != Isa::kScalar) {
              ASSERT_EQ(at_level, got) << isa_name(isa);
            }
            got = at_level;
          }
          for (int64_t k = 0; k < w.size(); ++k) w.data()[k] = std::fabs(w.data()[k]);
          const BitMask want = reference::mask_nm_rows(w.view(), p);
          ASSERT_EQ(got, want) << p.to_string() << " rows " << rows << " cols " << cols;
          const NmVerifyReport r = verify_nm(got, p);
          EXPECT_EQ(r.row_groups_full, r.row_groups);  // exactly n kept everywhere
        }
      }
    }
  }
}

TEST(MaskNmRows, TiesGoToLowerIndex) {
  const float row[8] = {1, 1, 1, 1, 0, 0, 0, 0};
  const BitMask mask = mask_nm_rows(ConstMatrixViewF(row, 1, 8), NmPattern::make(2, 4));
  EXPECT_TRUE(mask.get(0, 0) && mask.get(0, 1) && !mask.get(0, 2) && !mask.get(0, 3));
  EXPECT_TRUE(mask.get(0, 4) && mask.get(0, 5) && !mask.get(0, 6) && !mask.get(0, 7));
}

TEST(MaskNmRows, StridedInputAndInfinity) {
  // 2 x 4 view inside a 2 x 6 buffer; +inf ranks first.
  const float inf = std::numeric_limits<float>::infinity();
  const float data[12] = {0.5f, -inf, 0.1f, 0.2f, 99, 99, -3, 1, 2, 2.5f, 99, 99};
  const BitMask mask = mask_nm_magnitude(ConstMatrixViewF(data, 2, 4, 6), NmPattern::make(1, 4));
  EXPECT_TRUE(mask.get(0, 1));
  EXPECT_TRUE(mask.get(1, 0));
  EXPECT_EQ(mask.count(), 2);
}

TEST(MaskNmRows, SameResultForAnyThreadCount) {
  const Matrix w = testing::random_matrix(133, 96, 5);
  BitMask one;
  {
    ScopedNumThreads t(1);
    one = mask_nm_magnitude(w.view(), NmPattern::make(3, 8));
  }
  ScopedNumThreads t(2);
  EXPECT_EQ(mask_nm_magnitude(w.view(), NmPattern::make(3, 8)), one);
}

using testing::expect_error;

TEST(MaskNmRows, ClearErrors) {
  Matrix w = testing::random_matrix(3, 8, 1);
  expect_error(
      [&] {
        mask_nm_magnitude(w.view(), NmPattern{2, 3});
      },
      "cols (8) is not a multiple of m (3)");
  expect_error([&] { mask_nm_magnitude(w.view(), NmPattern{5, 4}); }, "exceeds group size");
  w(2, 5) = std::nanf("");
  expect_error([&] { mask_nm_magnitude(w.view(), NmPattern{2, 4}); }, "weight (2, 5) is NaN");
  w(2, 5) = -1.0f;
  expect_error(
      [&] {
        mask_nm_rows(w.view(), NmPattern{2, 4});
      },
      "must be non-negative");  // raw scores may not be negative
}

// The m = 4 vector path validates inside its loop: invalid values deep inside a wide row, and in
// its scalar tail, are still found and located.
TEST(MaskNmRows, InvalidValuesFoundInVectorPathAndTail) {
  for (const NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{3, 4}}) {
    for (const int64_t col : {37, 63, 66}) {  // 66 lies in the tail of a 68-wide row
      Matrix w = testing::random_matrix(3, 68, 11);
      w(1, col) = std::nanf("");
      expect_error([&] { mask_nm_magnitude(w.view(), p); },
                   "weight (1, " + std::to_string(col) + ") is NaN");
      w(1, col) = -0.5f;
      for (int64_t k = 0; k < w.size(); ++k) w.data()[k] = std::fabs(w.data()[k]);
      w(1, col) = -0.5f;
      expect_error([&] { mask_nm_rows(w.view(), p); },
                   "score (1, " + std::to_string(col) + ") is -0.5");
    }
  }
}

TEST(ApplyMask, ZeroesPrunedAsPositiveZero) {
  Matrix w = testing::random_matrix(4, 8, 2);
  w(0, 0) = -0.0f;
  const BitMask mask = mask_nm_magnitude(w.view(), NmPattern::make(2, 4));
  Matrix masked = w;
  apply_mask(masked.view(), mask);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      if (mask.get(i, j)) {
        EXPECT_EQ(masked(i, j), w(i, j));
      } else {
        EXPECT_FALSE(std::signbit(masked(i, j)));
        EXPECT_EQ(masked(i, j), 0.0f);
      }
    }
  }
  EXPECT_THROW(apply_mask(masked.view(), BitMask(4, 4)), Error);
}

}  // namespace
}  // namespace nms
