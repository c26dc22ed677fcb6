// SparseGPT against a straightforward double-precision implementation written for this test:
// explicit inverse (Gauss-Jordan), textbook Cholesky of H⁻¹, and every update applied at once to
// all later columns (no blocks, no lazy GEMM, no reversed-order factorisation).
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

using Dense = std::vector<double>;  // row-major n × n

Dense invert(Dense a, int64_t n) {
  Dense inv(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) inv[i * n + i] = 1.0;
  for (int64_t c = 0; c < n; ++c) {
    int64_t piv = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[piv * n + c])) piv = r;
    for (int64_t k = 0; k < n; ++k) {
      std::swap(a[c * n + k], a[piv * n + k]);
      std::swap(inv[c * n + k], inv[piv * n + k]);
    }
    const double d = a[c * n + c];
    for (int64_t k = 0; k < n; ++k) {
      a[c * n + k] /= d;
      inv[c * n + k] /= d;
    }
    for (int64_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r * n + c];
      for (int64_t k = 0; k < n; ++k) {
        a[r * n + k] -= f * a[c * n + k];
        inv[r * n + k] -= f * inv[c * n + k];
      }
    }
  }
  return inv;
}

// Upper U with A = UᵀU: U = Lᵀ for the lower Cholesky factor L of A.
Dense cholesky_upper(const Dense& a, int64_t n) {
  Dense l(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = i == j ? std::sqrt(s) : s / l[j * n + j];
    }
  Dense u(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) u[j * n + i] = l[i * n + j];
  return u;
}

// The reference: returns the pruned weights (double) and fills `mask`.
Dense reference_sparsegpt(const Matrix& w0, const LayerCalibration& c, const PruneOptions& o,
                          BitMask& mask) {
  const int64_t rows = w0.rows(), n = w0.cols(), m = o.pattern.m;
  Dense h(static_cast<size_t>(n * n));
  double mean = 0.0;
  for (int64_t k = 0; k < n * n; ++k) h[k] = c.hessian[k] / static_cast<double>(c.samples);
  for (int64_t j = 0; j < n; ++j) mean += h[j * n + j] / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) h[j * n + j] += o.damp * mean;
  const Dense u = cholesky_upper(invert(h, n), n);
  Dense w(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) w[i * n + j] = w0(i, j);
  mask = BitMask(rows, n);
  for (int64_t j = 0; j < n; ++j) {
    if (j % m == 0) {
      Matrix s(rows, m);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < m; ++k) {
          const double d = u[(j + k) * n + j + k];
          s(i, k) = static_cast<float>(w[i * n + j + k] * w[i * n + j + k] / (d * d));
        }
      BitMask g(rows, m);
      if (o.structure == PruneStructure::kTransposable) {
        g = mask_transposable_exact(s.view(), o.pattern).mask;
      } else {
        for (int64_t i = 0; i < rows; ++i) {
          std::vector<int64_t> idx(static_cast<size_t>(m));
          std::iota(idx.begin(), idx.end(), 0);
          std::stable_sort(idx.begin(), idx.end(),
                           [&](int64_t a, int64_t b) { return s(i, a) > s(i, b); });
          for (int k = 0; k < o.pattern.n; ++k) g.set(i, idx[k]);
        }
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < m; ++k) mask.set(i, j + k, g.get(i, k));
    }
    for (int64_t i = 0; i < rows; ++i) {
      if (mask.get(i, j)) continue;
      const double e = w[i * n + j] / u[j * n + j];
      for (int64_t k = j; k < n; ++k) w[i * n + k] -= e * u[j * n + k];
      w[i * n + j] = 0.0;
    }
  }
  return w;
}

struct Case {
  int n, m;
  PruneStructure structure;
  int64_t rows, cols, block;
};

class SparseGptTest : public ::testing::TestWithParam<Case> {};

TEST_P(SparseGptTest, MatchesTheDoubleReference) {
  const Case k = GetParam();
  const int64_t samples = 3 * k.cols;
  const LayerCalibration c =
      testing::statistics_of(testing::correlated_inputs(samples, k.cols, 21), samples, k.cols);
  const Matrix w0 = testing::random_matrix(k.rows, k.cols, 22);
  PruneOptions o;
  o.pattern = NmPattern::make(k.n, k.m);
  o.structure = k.structure;
  o.block = k.block;
  BitMask ref_mask;
  const Dense ref = reference_sparsegpt(w0, c, o, ref_mask);
  Matrix w = w0;
  const PruneResult r = prune_sparsegpt(w.view(), c, o);
  EXPECT_EQ(r.mask, ref_mask);
  // float32 updates through a well-conditioned (damped) factor: every weight within 1e-3 of the
  // double reference relative to the largest weight (errors of a few ulps per update, summed over
  // at most `cols` updates of magnitude <= max|w|).
  double max_w = 0.0;
  for (double v : ref) max_w = std::max(max_w, std::fabs(v));
  for (int64_t i = 0; i < k.rows; ++i)
    for (int64_t j = 0; j < k.cols; ++j) {
      ASSERT_NEAR(w(i, j), ref[i * k.cols + j], 1e-3 * max_w) << i << "," << j;
      if (!r.mask.get(i, j)) {
        ASSERT_EQ(std::bit_cast<uint32_t>(w(i, j)), 0u);
      }
    }
  // And the point of the updates: a smaller output error than magnitude or Wanda at this mask size.
  Matrix wm = w0, ww = w0;
  o.structure = k.structure;
  prune_magnitude(wm.view(), o);
  prune_wanda(ww.view(), c, o);
  const double e_sgpt = reconstruction_error(w0.view(), w.view(), c);
  EXPECT_LT(e_sgpt, reconstruction_error(w0.view(), wm.view(), c));
  EXPECT_LT(e_sgpt, reconstruction_error(w0.view(), ww.view(), c));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SparseGptTest,
    ::testing::Values(Case{2, 4, PruneStructure::kRowwise, 8, 32, 128},  // one block
                      Case{2, 4, PruneStructure::kRowwise, 5, 48, 8},    // lazy updates, odd rows
                      Case{1, 4, PruneStructure::kRowwise, 3, 36, 6},    // block rounded to 8
                      Case{4, 8, PruneStructure::kRowwise, 7, 40, 16},
                      Case{2, 4, PruneStructure::kTransposable, 8, 32, 8},
                      Case{4, 8, PruneStructure::kTransposable, 16, 48, 16},
                      Case{8, 16, PruneStructure::kTransposable, 16, 32, 16}));

TEST(SparseGpt, DeadInputsAreZeroedAndNotPositiveDefiniteIsNamed) {
  const int64_t in = 8, samples = 24;
  std::vector<double> x = testing::correlated_inputs(samples, in, 23);
  for (int64_t s = 0; s < samples; ++s) x[s * in + 3] = 0.0;  // feature 3 never active
  const LayerCalibration c = testing::statistics_of(x, samples, in);
  Matrix w = testing::random_matrix(4, in, 24);
  PruneOptions o;
  prune_sparsegpt(w.view(), c, o);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(w(i, 3), 0.0f);
  LayerCalibration bad = c;  // an indefinite "Hessian" that passes the cheap file checks
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < in; ++j) bad.hessian[i * in + j] = i == j ? 1.0 : 0.99;
  bad.hessian[0 * in + 1] = bad.hessian[1 * in + 0] = -0.99;
  bad.hessian[3 * in + 3] = 1.0;
  Matrix w2 = testing::random_matrix(4, in, 25);
  o.damp = 1e-6;
  testing::expect_error([&] { prune_sparsegpt(w2.view(), bad, o); }, "not positive definite");
}

}  // namespace
}  // namespace nms
