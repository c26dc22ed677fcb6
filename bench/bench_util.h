// Helpers shared by the kernel benchmarks: inputs, medians, errors.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <thread>
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

// Between the timed calls of a pair, with more than one thread: OpenBLAS's pthread workers spin
// for about 100 ms after each call (measured here: one core busy 100-110 ms after a 2-thread
// sgemm), and our kernel timed right after sgemm shared a core with one (2 threads, forward 2:4 T
// 8192 x 768 -> 3072: 164.8 ms back to back, 119.0 with OPENBLAS_THREAD_TIMEOUT=4; the nmsparse
// bench kernels command pauses the same way). Only while the workers spin: with
// OPENBLAS_THREAD_TIMEOUT set (nms::reexec_with_thread_runtime_env sets it, and GOMP_SPINCOUNT=
// 10000) the pause itself did harm on this VM. After 150 ms idle, the next 2-thread region often
// ran at one thread's speed: forward 6400 x 192 -> 768 took 5.3-5.7 ms back to back and 10-12 ms
// in about half the calls after a pause, in the sparse and the dense call alike (`nmsparse bench
// kernels --threads 2`: dense 10.1-10.3 / sparse 6.2-6.8 ms without the pause, 14.1-19.6 /
// 11.5-11.8 with it; Zen 4, 2026-12-06).
inline void settle(int threads) {
  static const bool blas_spins = std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr;
  if (threads > 1 && blas_spins) std::this_thread::sleep_for(std::chrono::milliseconds(150));
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
