// Seeded test data built on the library's counter-based RNG (no std::random_device anywhere).
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/format/compressed_nm.h"

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

// rows x cols, N:M along `axis`: each group keeps a random subset of at most n (every 5th group
// keeps one fewer, so rows with fewer than n kept occur).
inline Matrix random_nm(int64_t rows, int64_t cols, NmPattern p, NmAxis axis, uint64_t seed) {
  Matrix d = random_matrix(rows, cols, seed);
  const CounterRng rng(seed, 99);
  const bool along_rows = axis == NmAxis::kRows;
  const int64_t outer = along_rows ? rows : cols;
  const int64_t groups = (along_rows ? cols : rows) / p.m;
  uint64_t draw = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<int> order(static_cast<size_t>(p.m));
      for (int i = 0; i < p.m; ++i) order[static_cast<size_t>(i)] = i;
      for (int i = p.m - 1; i > 0; --i) {  // Fisher-Yates
        const auto j = static_cast<int>(rng.word(draw++) % static_cast<uint32_t>(i + 1));
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
      }
      const int keep = (o + g) % 5 == 0 ? p.n - 1 : p.n;
      for (int i = keep; i < p.m; ++i) {
        const int64_t e = g * p.m + order[static_cast<size_t>(i)];
        (along_rows ? d(o, e) : d(e, o)) = 0.0f;
      }
    }
  }
  return d;
}

}  // namespace nms::testing
