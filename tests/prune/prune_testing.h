// Test data for the pruners: correlated calibration inputs and their exact statistics.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "nmsparse/core/rng.h"
#include "nmsparse/prune/calibration.h"

namespace nms::testing {

// samples × in inputs x = z·A + 0.1·z' (z, z' uniform in [-1, 1), A in × in random): strongly
// correlated features, so H is far from diagonal and SparseGPT's updates matter.
inline std::vector<double> correlated_inputs(int64_t samples, int64_t in, uint64_t seed) {
  const CounterRng rng(seed, 7);
  std::vector<double> a(static_cast<size_t>(in * in));
  for (int64_t k = 0; k < in * in; ++k) a[k] = 2.0 * rng.uniform(k) - 1.0;
  std::vector<double> x(static_cast<size_t>(samples * in), 0.0);
  const int64_t base = in * in;
  for (int64_t s = 0; s < samples; ++s) {
    for (int64_t i = 0; i < in; ++i) {
      const double z = 2.0 * rng.uniform(base + s * in + i) - 1.0;
      for (int64_t j = 0; j < in; ++j) x[s * in + j] += z * a[i * in + j] / std::sqrt(in);
    }
    for (int64_t j = 0; j < in; ++j)
      x[s * in + j] += 0.1 * (2.0 * rng.uniform(base + samples * in + s * in + j) - 1.0) + 0.05;
  }
  return x;
}

// The exact statistics of `x` (double sums; every field present).
inline LayerCalibration statistics_of(const std::vector<double>& x, int64_t samples, int64_t in,
                                      const std::string& name = "layer") {
  LayerCalibration c;
  c.name = name;
  c.in = in;
  c.samples = samples;
  c.act_norm.assign(static_cast<size_t>(in), 0.0);
  c.input_sum.assign(static_cast<size_t>(in), 0.0);
  c.hessian.assign(static_cast<size_t>(in * in), 0.0);
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t i = 0; i < in; ++i) {
      c.input_sum[i] += x[s * in + i];
      for (int64_t j = 0; j < in; ++j) c.hessian[i * in + j] += x[s * in + i] * x[s * in + j];
    }
  for (int64_t j = 0; j < in; ++j) c.act_norm[j] = std::sqrt(c.hessian[j * in + j]);
  return c;
}

}  // namespace nms::testing
