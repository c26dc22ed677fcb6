// Post-training pruning of one 4096 x 4096 layer (H 4096 x 4096) on one thread: SparseGPT with
// transposable 8:16 masks (exact solver), SparseGPT row-wise 2:4, Wanda transposable 8:16 and
// row-wise 2:4, and the dense sgemm of the same size as the yardstick (one out·in² pass, 137 GFLOP:
// what SparseGPT's lazy updates cost at least). Targets (issue 6): SparseGPT ≤ 5 s, Wanda ≤ 0.5 s.
// Run: build/bench/bench_prune --benchmark_min_time=1   (each iteration is seconds long)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"

#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/prune/prune.h"

namespace nms {
namespace {

constexpr int64_t kDim = 4096;

// Statistics of 2·kDim correlated samples, H = XᵀX by one ssyrk (the bench's set-up, not timed).
const LayerCalibration& calibration() {
  static const LayerCalibration c = [] {
    const int64_t samples = 2 * kDim;
    std::vector<float> x(static_cast<size_t>(samples * kDim));
    const CounterRng rng(3, 4);
    for (int64_t k = 0; k < samples * kDim; ++k) x[k] = 2.0f * rng.uniform(k) - 1.0f;
    for (int64_t s = 0; s < samples; ++s)  // neighbouring features correlated
      for (int64_t j = 1; j < kDim; ++j) x[s * kDim + j] += 0.5f * x[s * kDim + j - 1];
    std::vector<float> h(static_cast<size_t>(kDim * kDim), 0.0f);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, kDim, samples, 1.0f, x.data(), kDim, 0.0f,
                h.data(), kDim);
    LayerCalibration out;
    out.name = "bench";
    out.in = kDim;
    out.samples = samples;
    out.hessian.resize(static_cast<size_t>(kDim * kDim));
    out.act_norm.resize(static_cast<size_t>(kDim));
    for (int64_t i = 0; i < kDim; ++i)
      for (int64_t j = 0; j < kDim; ++j)
        out.hessian[i * kDim + j] = h[std::min(i, j) * kDim + std::max(i, j)];
    for (int64_t j = 0; j < kDim; ++j) out.act_norm[j] = std::sqrt(out.hessian[j * kDim + j]);
    return out;
  }();
  return c;
}

Matrix weights() {
  Matrix w(kDim, kDim);
  const CounterRng rng(5, 6);
  for (int64_t k = 0; k < w.size(); ++k) w.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return w;
}

// range(0): 0 sparsegpt, 1 wanda; range(1): 0 row-wise 2:4, 1 transposable 8:16 (exact);
// range(2): threads (OpenMP and OpenBLAS).
void BM_Prune(benchmark::State& state) {
  const int t = static_cast<int>(state.range(2));
  ScopedNumThreads threads(t);
  openblas_set_num_threads(t);
  const LayerCalibration& c = calibration();
  const Matrix w0 = weights();
  PruneOptions o;
  if (state.range(1) == 1) {
    o.pattern = NmPattern::make(8, 16);
    o.structure = PruneStructure::kTransposable;
  }
  for (auto _ : state) {
    state.PauseTiming();
    Matrix w = w0;
    state.ResumeTiming();
    const PruneResult r =
        state.range(0) == 0 ? prune_sparsegpt(w.view(), c, o) : prune_wanda(w.view(), c, o);
    benchmark::DoNotOptimize(r.stats.kept);
  }
}
BENCHMARK(BM_Prune)
    ->ArgNames({"sparsegpt0_wanda1", "transposable816", "threads"})
    ->Args({0, 1, 1})
    ->Args({0, 0, 1})
    ->Args({1, 1, 1})
    ->Args({1, 0, 1})
    ->Args({0, 1, 2})
    ->Args({1, 1, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_DenseSgemmYardstick(benchmark::State& state) {
  openblas_set_num_threads(1);
  const Matrix a = weights();
  Matrix c(kDim, kDim);
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kDim, kDim, kDim, 1.0f, a.data(), kDim,
                a.data(), kDim, 0.0f, c.data(), kDim);
}
BENCHMARK(BM_DenseSgemmYardstick)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
