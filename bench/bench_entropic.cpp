// Entropic transposable mask (TSENOR-style) throughput: 8:16 and 16:32 on a 1024 x 1024 matrix of
// |Laplace(0,1)| scores, default options (tau 100, T 300, L 10, repair), single thread and all
// threads. items_per_second counts input weights.
//
//   build/bench/bench_entropic --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/mask/transposable.h"

namespace nms {
namespace {

Matrix laplace_matrix(int64_t rows, int64_t cols) {
  Matrix a(rows, cols);
  const CounterRng rng(3, 4);
  for (int64_t k = 0; k < a.size(); ++k) {
    a.data()[k] = static_cast<float>(-std::log(1.0 - static_cast<double>(rng.uniform(k))));
  }
  return a;
}

// Args: size, n, m, threads (0 = all).
void BM_Entropic(benchmark::State& state) {
  const int previous = max_threads();
  if (state.range(3) > 0) set_num_threads(static_cast<int>(state.range(3)));
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const Matrix w = laplace_matrix(state.range(0), state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(mask_transposable_entropic(w.view(), p));
  state.SetItemsProcessed(state.iterations() * w.size());
  set_num_threads(previous);
}

BENCHMARK(BM_Entropic)
    ->Args({1024, 8, 16, 1})
    ->Args({1024, 16, 32, 1})
    ->Args({1024, 8, 16, 0})
    ->Args({1024, 16, 32, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
