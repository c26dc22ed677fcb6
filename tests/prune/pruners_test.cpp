// Magnitude and Wanda against direct computation, mask selection by structure, and the
// reconstruction error against the explicit outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include "nmsparse/mask/transposable.h"
#include "nmsparse/prune/prune.h"
#include "prune_testing.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

using testing::expect_error;

// Naive top-n of every m along rows, ties to the lower index: sort indices by (-score, index).
BitMask naive_rowwise(const Matrix& s, NmPattern p) {
  BitMask mask(s.rows(), s.cols());
  for (int64_t i = 0; i < s.rows(); ++i)
    for (int64_t g = 0; g < s.cols(); g += p.m) {
      std::vector<int64_t> idx(static_cast<size_t>(p.m));
      std::iota(idx.begin(), idx.end(), g);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int64_t a, int64_t b) { return s(i, a) > s(i, b); });
      for (int k = 0; k < p.n; ++k) mask.set(i, idx[k]);
    }
  return mask;
}

void expect_zero_outside(const Matrix& w, const BitMask& mask) {
  for (int64_t i = 0; i < w.rows(); ++i)
    for (int64_t j = 0; j < w.cols(); ++j)
      if (!mask.get(i, j)) {
        EXPECT_EQ(std::bit_cast<uint32_t>(w(i, j)), 0u) << i << "," << j;
      }
}

TEST(PruneMagnitude, RowwiseIsTopNOfAbsoluteValues) {
  for (NmPattern p : {NmPattern::make(2, 4), NmPattern::make(1, 4), NmPattern::make(4, 8),
                      NmPattern::make(8, 16), NmPattern::make(3, 7)}) {
    Matrix w = testing::random_integer_matrix(5, p.m * 3, 3, 11);  // many ties
    Matrix s(w.rows(), w.cols());
    for (int64_t k = 0; k < w.size(); ++k) s.data()[k] = std::fabs(w.data()[k]);
    const Matrix before = w;
    PruneOptions o;
    o.pattern = p;
    const PruneResult r = prune_magnitude(w.view(), o);
    EXPECT_EQ(r.mask, naive_rowwise(s, p)) << p.to_string();
    expect_zero_outside(w, r.mask);
    for (int64_t k = 0; k < w.size(); ++k)
      if (w.data()[k] != 0.0f) {
        EXPECT_EQ(w.data()[k], before.data()[k]);
      }
    EXPECT_DOUBLE_EQ(r.stats.density, static_cast<double>(p.n) / p.m);
  }
}

TEST(PruneWanda, ScoresAreWeightTimesActivationNorm) {
  const NmPattern p = NmPattern::make(2, 4);
  const int64_t in = 16;
  const LayerCalibration c = testing::statistics_of(testing::correlated_inputs(30, in, 5), 30, in);
  Matrix w = testing::random_matrix(8, in, 12);
  Matrix s(8, in);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < in; ++j)
      s(i, j) = static_cast<float>(std::fabs(w(i, j)) * c.act_norm[j]);
  PruneOptions o;
  o.pattern = p;
  Matrix wr = w;
  EXPECT_EQ(prune_wanda(wr.view(), c, o).mask, naive_rowwise(s, p));
  // Transposable: the exact solver's mask of the same scores, valid in both directions.
  o.structure = PruneStructure::kTransposable;
  Matrix wt = w;
  const PruneResult t = prune_wanda(wt.view(), c, o);
  EXPECT_EQ(t.mask, mask_transposable_exact(s.view(), p).mask);
  for (int64_t i = 0; i < 8; i += 4)
    for (int64_t j = 0; j < in; j += 4)
      for (int64_t k = 0; k < 4; ++k) {
        EXPECT_LE(t.mask.count_row_range(i + k, j, 4), 2);
        EXPECT_LE(t.mask.count_col_range(j + k, i, 4), 2);
      }
  expect_zero_outside(wt, t.mask);
}

TEST(PruneSelectMask, UnstructuredKeepsTheSameCountPerRowAndTheLargest) {
  const Matrix s = testing::random_integer_matrix(6, 30, 4, 13);
  Matrix a(6, 30);
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = std::fabs(s.data()[k]);
  PruneOptions o;
  o.pattern = NmPattern::make(1, 4);
  o.structure = PruneStructure::kUnstructured;
  const BitMask mask = prune_select_mask(a.view(), o);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(mask.count_row(i), 8);  // round(30 / 4) = 7.5 -> 8 (half away from zero)
    float min_kept = INFINITY, max_pruned = -1.0f;
    for (int64_t j = 0; j < 30; ++j) {
      if (mask.get(i, j)) {
        min_kept = std::min(min_kept, a(i, j));
      } else {
        max_pruned = std::max(max_pruned, a(i, j));
      }
    }
    EXPECT_GE(min_kept, max_pruned);
  }
}

TEST(PruneLayer, ShapeAndCalibrationErrorsNameTheValue) {
  PruneOptions o;
  o.pattern = NmPattern::make(2, 4);
  Matrix w = testing::random_matrix(6, 10, 1);
  expect_error([&] { prune_magnitude(w.view(), o); }, "10 input columns, not a multiple of m (4)");
  Matrix w2 = testing::random_matrix(6, 8, 1);
  o.structure = PruneStructure::kTransposable;
  expect_error([&] { prune_magnitude(w2.view(), o); }, "6 output rows");
  o.structure = PruneStructure::kRowwise;
  const LayerCalibration c = testing::statistics_of(testing::correlated_inputs(10, 12, 1), 10, 12);
  expect_error([&] { prune_wanda(w2.view(), c, o); }, "in = 12");
  LayerCalibration no_h = testing::statistics_of(testing::correlated_inputs(10, 8, 1), 10, 8);
  no_h.hessian.clear();
  expect_error([&] { prune_sparsegpt(w2.view(), no_h, o); }, "needs the Hessian");
  expect_error([&] { prune_layer(PruneMethod::kWanda, w2.view(), {}, nullptr, o); },
               "needs calibration statistics");
  o.damp = 0.0;
  expect_error([&] { prune_magnitude(w2.view(), o); }, "damp (0)");
  w2(1, 1) = NAN;
  o.damp = 0.01;
  expect_error([&] { prune_magnitude(w2.view(), o); }, "weight (1, 1)");
}

TEST(ReconstructionError, MatchesTheExplicitOutputs) {
  const int64_t samples = 40, in = 12, out = 5;
  const std::vector<double> x = testing::correlated_inputs(samples, in, 6);
  const LayerCalibration c = testing::statistics_of(x, samples, in);
  const Matrix w = testing::random_matrix(out, in, 7);
  Matrix wp = w;
  PruneOptions o;
  prune_magnitude(wp.view(), o);
  const std::vector<float> b = {0.5f, -1.0f, 0.25f, 2.0f, 0.0f};
  const std::vector<float> bp = {0.4f, -1.0f, 0.5f, 2.0f, 1.0f};
  for (bool with_bias : {false, true}) {
    double num = 0.0, den = 0.0;
    for (int64_t s = 0; s < samples; ++s)
      for (int64_t r = 0; r < out; ++r) {
        double y = with_bias ? b[r] : 0.0, yp = with_bias ? bp[r] : 0.0;
        for (int64_t j = 0; j < in; ++j) {
          y += w(r, j) * x[s * in + j];
          yp += wp(r, j) * x[s * in + j];
        }
        num += (y - yp) * (y - yp);
        den += y * y;
      }
    const double got = with_bias ? reconstruction_error(w.view(), wp.view(), c, b, bp)
                                 : reconstruction_error(w.view(), wp.view(), c);
    // The quadratic forms run in float32 (sgemm over 12 terms): relative 1e-4 is ample.
    EXPECT_NEAR(got, std::sqrt(num / den), 1e-4 * std::sqrt(num / den)) << with_bias;
  }
  EXPECT_EQ(reconstruction_error(w.view(), w.view(), c), 0.0);
}

}  // namespace
}  // namespace nms
