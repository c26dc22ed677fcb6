// Helpers shared by the kernel benchmarks: inputs, medians, errors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"

namespace nms::bench {

// Uniform [-1, 1) entries, a function of (rows, cols, seed).
inline Matrix uniform_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix a(rows, cols);
  const CounterRng rng(seed, 7);
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return a;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// max |got - ref| / max |ref| over all elements.
inline double max_rel_error(const Matrix& got, const Matrix& ref) {
  double err = 0.0;
  double scale = 0.0;
  for (int64_t k = 0; k < ref.size(); ++k) {
    err = std::max(err, std::fabs(double{got.data()[k]} - ref.data()[k]));
    scale = std::max(scale, std::fabs(double{ref.data()[k]}));
  }
  return err / std::max(scale, 1e-300);
}

}  // namespace nms::bench
