// Seeded test data built on the library's counter-based RNG (no std::random_device anywhere).
#pragma once

#include <cmath>
#include <cstdint>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"

namespace nms::testing {

// rows x cols matrix, entries uniform in [-1, 1) (24-bit resolution).
inline Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix a(rows, cols);
  const CounterRng rng(seed, 0);
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return a;
}

// Integer-valued entries in [-levels, levels]: many exact ties, exact sums.
inline Matrix random_integer_matrix(int64_t rows, int64_t cols, int levels, uint64_t seed) {
  Matrix a(rows, cols);
  const CounterRng rng(seed, 1);
  for (int64_t k = 0; k < a.size(); ++k) {
    a.data()[k] = std::floor(rng.uniform(k) * static_cast<float>(2 * levels + 1)) -
                  static_cast<float>(levels);
  }
  return a;
}

// |a| elementwise: non-negative scores for the mask solvers.
inline Matrix abs_of(Matrix a) {
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = std::fabs(a.data()[k]);
  return a;
}

}  // namespace nms::testing
