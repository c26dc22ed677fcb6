// Bi-Mask: the optimised search against the element-by-element reference, the mask invariants,
// the analytic identity fraction on i.i.d. weights, search ordering, thread independence, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "mask/bimask_reference.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/verify.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr int kScale = 1;
#else
constexpr int kScale = 4;
#endif

// i.i.d. N(0, 1) by Box-Muller on CounterRng doubles.
Matrix gaussian(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix a(rows, cols);
  const CounterRng rng(seed, 7);
  for (int64_t k = 0; k < a.size(); ++k) {
    const double u1 = 1.0 - rng.uniform_double(2 * static_cast<uint64_t>(k));
    const double u2 = rng.uniform_double(2 * static_cast<uint64_t>(k) + 1);
    a.data()[k] =
        static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return a;
}

void expect_same(const BiMaskResult& a, const BiMaskResult& b) {
  EXPECT_EQ(a.perm, b.perm);
  EXPECT_TRUE(a.forward == b.forward);
  EXPECT_TRUE(a.backward == b.backward);
  EXPECT_EQ(a.identity, b.identity);
  EXPECT_EQ(a.best_random, b.best_random);
  EXPECT_EQ(a.final_score, b.final_score);
  EXPECT_EQ(a.best_candidate, b.best_candidate);
  EXPECT_EQ(a.proposals, b.proposals);
  EXPECT_EQ(a.accepted, b.accepted);
  EXPECT_EQ(a.forward_kept, b.forward_kept);
}

// M_b ⊆ M_f; permuted M_b is n:m along columns; each (group, column) keeps min(count, n); the
// final score is what the backward mask keeps.
void check_invariants(ConstMatrixViewF w, NmPattern p, const BiMaskResult& r) {
  const BitMask& f = r.forward;
  const BitMask& b = r.backward;
  for (int64_t i = 0; i < f.rows(); ++i)
    for (int64_t k = 0; k < f.words_per_row(); ++k)
      ASSERT_EQ(b.row_words(i)[k] & ~f.row_words(i)[k], 0u) << "M_b not in M_f, row " << i;
  EXPECT_TRUE(verify_nm(f, p).rows_valid());
  const BitMask bp = permute_rows(b, r.perm);
  EXPECT_TRUE(verify_nm(bp, p).cols_valid());
  const BitMask fp = permute_rows(f, r.perm);
  for (int64_t g = 0; g < w.rows() / p.m; ++g)
    for (int64_t j = 0; j < w.cols(); ++j)
      ASSERT_EQ(bp.count_col_range(j, g * p.m, p.m),
                std::min<int64_t>(fp.count_col_range(j, g * p.m, p.m), p.n));
  EXPECT_EQ(b.count(), r.final_score.kept);
  EXPECT_EQ(bimask_score(f, p, r.perm), r.final_score);
  EXPECT_EQ(r.forward_kept, w.rows() * w.cols() / p.m * p.n);
}

struct Case {
  int64_t out, in;
  int n, m;
};

TEST(BiMask, ReferenceMatchesOnEdgeSizes) {
  const Case cases[] = {
      {4, 64, 2, 4},    // out == m: one group, nothing to permute
      {8, 8, 2, 4},     // in < 64
      {12, 200, 2, 4},  // in not a multiple of 64 (4 words, last partial)
      {16, 192, 2, 4},  // 3 words (odd)
      {20, 136, 1, 4},  // N = 1, 3 words, partial
      {12, 72, 4, 4},   // N = M: everything eligible, nothing lost
      {16, 136, 4, 8},  // 4:8
      {24, 48, 3, 8},   // generic (runtime) scorer
      {10, 130, 1, 2},  // 1:2, odd word count
      {32, 64, 8, 16},
  };
  for (const Case& c : cases) {
    const NmPattern p = NmPattern::make(c.n, c.m);
    for (int kind = 0; kind < 2; ++kind) {
      const Matrix w = kind == 0 ? testing::random_matrix(c.out, c.in, 11 + c.out)
                                 : testing::random_integer_matrix(c.out, c.in, 1, 5 + c.in);
      for (BiMaskCriterion crit : {BiMaskCriterion::kKept, BiMaskCriterion::kEligible}) {
        for (BiMaskSearch search : {BiMaskSearch::kRandom, BiMaskSearch::kImprove}) {
          SCOPED_TRACE(::testing::Message()
                       << c.out << "x" << c.in << " " << p.to_string() << " kind " << kind << " "
                       << criterion_name(crit) << " " << search_name(search));
          BiMaskOptions o;
          o.candidates = 6;
          o.criterion = crit;
          o.search = search;
          o.seed = 42;
          o.improve_proposals = 60;
          const BiMaskResult r = bimask(w.view(), p, o);
          const BiMaskResult ref = reference::bimask(w.view(), p, o);
          expect_same(r, ref);
          check_invariants(w.view(), p, r);
          EXPECT_EQ(reference::bimask_score(w.view(), r.forward, p, r.perm), r.final_score);
        }
      }
    }
  }
}

TEST(BiMask, BackwardMatchesReferenceForManyPermutations) {
  // Integer weights in [-2, 2]: ties and exact zeros inside the forward-kept sets.
  for (const Case& c : {Case{24, 136, 2, 4}, Case{16, 72, 1, 4}, Case{16, 64, 4, 8}}) {
    const NmPattern p = NmPattern::make(c.n, c.m);
    const Matrix w = testing::random_integer_matrix(c.out, c.in, 2, 3);
    const BitMask f = mask_nm_magnitude(w.view(), p);
    for (int cand = 0; cand < 8; ++cand) {
      const std::vector<int64_t> perm = bimask_candidate(c.out, 9, cand);
      EXPECT_TRUE(bimask_backward(w.view(), f, p, perm) ==
                  reference::bimask_backward(w.view(), f, p, perm));
      EXPECT_EQ(bimask_score(f, p, perm), reference::bimask_score(w.view(), f, p, perm));
    }
  }
}

// The AVX-512 path (m <= 16, 16 columns per step) against the reference at every level (ties,
// zeros, column counts that end inside a 64-bit word, m = 32 on the scalar path), and against the
// scalar path with a few NaN weights (a NaN compares false both ways in both).
TEST(BiMask, BackwardMatchesReferenceAtEveryLevel) {
  uint64_t seed = 40;
  for (const Case& c :
       {Case{32, 200, 2, 4}, Case{16, 77 * 4, 1, 4}, Case{32, 80, 8, 16}, Case{64, 96, 16, 32}}) {
    const NmPattern p = NmPattern::make(c.n, c.m);
    Matrix w = testing::random_integer_matrix(c.out, c.in, 2, seed++);
    const BitMask f = mask_nm_magnitude(w.view(), p);
    for (bool nan : {false, true}) {
      if (nan) {
        for (int64_t k = 0; k < 5; ++k) w((k * 7) % c.out, (k * 13) % c.in) = std::nanf("");
      }
      for (int cand = 0; cand < 3; ++cand) {
        const std::vector<int64_t> perm = bimask_candidate(c.out, 5, cand);
        BitMask want = reference::bimask_backward(w.view(), f, p, perm);
        if (nan) {
          ScopedIsa scalar(Isa::kScalar);
          want = bimask_backward(w.view(), f, p, perm);
        }
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (isa > isa_supported()) continue;
          ScopedIsa scoped(isa);
          EXPECT_TRUE(bimask_backward(w.view(), f, p, perm) == want)
              << isa_name(isa) << " " << p.to_string() << " candidate " << cand
              << (nan ? " with NaN" : "");
        }
      }
    }
  }
}

TEST(BiMask, KeptZeroWeightsCountAsKept) {
  // 2:4, one group of 4 rows, 4 columns. Row i keeps columns {0, 1} (values 0 there, forced by
  // the rest being 0 too: ties go to the lower index). Column 0 then has 4 forward-kept zeros:
  // the backward mask keeps the 2 lowest permuted rows, i.e. kept zeros outrank pruned entries.
  Matrix w(4, 4);  // all zero
  const NmPattern p = NmPattern::make(2, 4);
  const BiMaskResult r = bimask(w.view(), p, {.candidates = 0});
  EXPECT_EQ(r.forward_kept, 8);
  EXPECT_EQ(r.final_score.kept, 4);      // min(4, 2) for columns 0 and 1
  EXPECT_EQ(r.final_score.eligible, 2);  // columns 2 and 3 keep 0 <= 2
  EXPECT_TRUE(r.backward.get(0, 0) && r.backward.get(1, 0) && !r.backward.get(2, 0));
  check_invariants(w.view(), p, r);
  // A nonzero weight beats kept zeros: put 5 in row 3, column 0.
  w(3, 0) = 5.0f;
  const BiMaskResult r2 = bimask(w.view(), p, {.candidates = 0});
  EXPECT_TRUE(r2.backward.get(3, 0) && r2.backward.get(0, 0) && !r2.backward.get(1, 0));
  expect_same(r2, reference::bimask(w.view(), p, {.candidates = 0}));
}

// E[min(Bin(m, n/m), n)] and Var of the same, from the binomial pmf.
std::pair<double, double> min_binomial_moments(int n, int m) {
  const double q = static_cast<double>(n) / m;
  double e = 0.0;
  double e2 = 0.0;
  for (int k = 0; k <= m; ++k) {
    const double pk =
        std::exp(std::lgamma(m + 1.0) - std::lgamma(k + 1.0) - std::lgamma(m - k + 1.0) +
                 k * std::log(q) + (m - k) * std::log1p(-q));
    const double x = std::min(k, n);
    e += pk * x;
    e2 += pk * x * x;
  }
  return {e, e2 - e * e};
}

TEST(BiMask, IdentityFractionOnGaussianMatchesAnalytic) {
  // Rows are independent, and a row keeps each column with probability n/m, so the forward-kept
  // count of a (group, column) is C ~ Bin(m, n/m) and the identity keeps X = min(C, n) of it:
  // E[fraction] = E[X] / n (2:4: 26/32 = 0.8125; 4:8: 0.8633; 1:4: 1 - (3/4)^4 = 0.6836).
  // Standard error: the m x m blocks (m rows x m columns) are independent units; a unit's sum
  // Y = X_1 + ... + X_m has Var(Y) <= m^2 Var(X) (Cauchy-Schwarz; the columns of one row group are
  // in fact negatively correlated), and fraction = mean(Y) / (m n) over U = out * in / m^2 units,
  // so SE <= sqrt(Var(X)) / (n sqrt(U)). Bound: 5 SE.
  const struct {
    int n, m;
    double expected;
  } cases[] = {{2, 4, 0.8125}, {4, 8, 0.86328125}, {1, 4, 0.68359375}};
  for (const auto& c : cases) {
    const int64_t out = 192 * kScale;
    const int64_t in = 192 * kScale;
    const Matrix w = gaussian(out, in, 100 + c.m);
    const auto [e, var] = min_binomial_moments(c.n, c.m);
    EXPECT_NEAR(e / c.n, c.expected, 1e-12);
    const double units = static_cast<double>(out * in) / (c.m * c.m);
    const double se = std::sqrt(var) / (c.n * std::sqrt(units));
    const BiMaskResult r = bimask(w.view(), NmPattern::make(c.n, c.m),
                                  {.candidates = 0, .search = BiMaskSearch::kRandom});
    EXPECT_NEAR(r.fraction(r.identity), c.expected, 5.0 * se) << c.n << ":" << c.m << " se " << se;
  }
}

TEST(BiMask, SearchOrderingImprovedAtLeastBestRandomAtLeastIdentity) {
  for (const auto& [n, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{1, 4}}) {
    const NmPattern p = NmPattern::make(n, m);
    const Matrix w = gaussian(64 * kScale, 128, 5);
    for (BiMaskCriterion crit : {BiMaskCriterion::kKept, BiMaskCriterion::kEligible}) {
      const BiMaskResult r = bimask(w.view(), p, {.candidates = 20, .criterion = crit, .seed = 3});
      const auto key = [crit](const BiMaskScore& s) {
        return crit == BiMaskCriterion::kKept ? std::pair{s.kept, s.eligible}
                                              : std::pair{s.eligible, s.kept};
      };
      EXPECT_GE(key(r.best_random), key(r.identity));
      EXPECT_GE(key(r.final_score), key(r.best_random));
      // The climb finds real improvements on i.i.d. weights (thousands of proposals).
      EXPECT_GT(key(r.final_score), key(r.best_random)) << p.to_string();
      EXPECT_GT(r.accepted, 0);
      check_invariants(w.view(), p, r);
    }
  }
}

TEST(BiMask, SameResultForOneAndTwoThreads) {
  const Matrix w = gaussian(128, 256, 8);
  const NmPattern p = NmPattern::make(2, 4);
  const BiMaskOptions o{.candidates = 30, .seed = 77};
  BiMaskResult one;
  BiMaskResult two;
  {
    ScopedNumThreads t(1);
    one = bimask(w.view(), p, o);
  }
  {
    ScopedNumThreads t(2);
    two = bimask(w.view(), p, o);
  }
  expect_same(one, two);
}

TEST(BiMask, DifferentSeedsGiveDifferentCandidates) {
  EXPECT_NE(bimask_candidate(64, 1, 1), bimask_candidate(64, 2, 1));
  EXPECT_NE(bimask_candidate(64, 1, 1), bimask_candidate(64, 1, 2));
  std::vector<int64_t> c = bimask_candidate(1000, 5, 3);
  std::sort(c.begin(), c.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(c[static_cast<size_t>(i)], i);
}

TEST(BiMask, BackwardOperandIsThePermutedMaskedTransposeCompressedAlongOut) {
  const Matrix w = testing::random_matrix(24, 136, 21);
  const NmPattern p = NmPattern::make(2, 4);
  const BiMaskResult r = bimask(w.view(), p, {.candidates = 5, .seed = 1});
  const CompressedNm c = bimask_backward_operand(w.view(), r);
  EXPECT_EQ(c.axis, NmAxis::kCols);
  EXPECT_EQ(c.rows, 24);
  EXPECT_EQ(c.cols, 136);
  EXPECT_EQ(c.value_rows(), 136);
  EXPECT_EQ(c.value_cols(), 24 / 4 * 2);
  nm_validate(c);
  const Matrix d = nm_decompress(c);
  for (int64_t i = 0; i < 24; ++i)
    for (int64_t j = 0; j < 136; ++j) {
      const int64_t src = r.perm[static_cast<size_t>(i)];
      ASSERT_EQ(d(i, j), r.backward.get(src, j) ? w(src, j) : 0.0f) << i << "," << j;
    }
}

TEST(BiMask, RejectsBadInput) {
  const Matrix w = testing::random_matrix(8, 8, 1);
  const NmPattern p = NmPattern::make(2, 4);
  const Matrix bad_out = testing::random_matrix(6, 8, 1);
  const Matrix bad_in = testing::random_matrix(8, 6, 1);
  testing::expect_error([&] { bimask(bad_out.view(), p); }, "out (6) is not a multiple of m (4)");
  testing::expect_error([&] { bimask(bad_in.view(), p); }, "in (6) is not a multiple of m (4)");
  testing::expect_error([&] { bimask(w.view(), p, {.candidates = -1}); }, "candidates (-1)");
  testing::expect_error([&] { bimask(w.view(), p, {.candidates = 2'000'000}); },
                        "candidates (2000000)");
  testing::expect_error([&] { bimask(w.view(), p, {.improve_proposals = -2}); },
                        "improve_proposals (-2)");
  Matrix nan = w;
  nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(bimask(nan.view(), p), Error);
  const BitMask f = mask_nm_magnitude(w.view(), p);
  testing::expect_error(
      [&] {
        bimask_backward(w.view(), f, p, {0, 1, 2, 3, 4, 5, 6, 6});
      },
      "no permutation");
  testing::expect_error([&] { bimask_score(f, p, {0, 1, 2}); }, "3 entries for 8 rows");
}

}  // namespace
}  // namespace nms
