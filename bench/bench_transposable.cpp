// Transposable N:M exact solver throughput: mask_transposable_exact (successive shortest paths
// from a balanced start; 2:4 exhaustive) vs LEMON's NetworkSimplex per tile, on the same tiles of
// a 1024 x 1024 matrix of |Laplace(0, 1)| scores. Single thread; items_per_second counts weights
// (m^2 per tile). LEMON gets the scores scaled by 1e6 and rounded to int64 costs; its tile graph
// and solver are built once and only the costs change per tile (testing::LemonTileSolver).
//
//   build/bench/bench_transposable --benchmark_min_time=1
//
// Figures and the CLI equivalent with round-robin timing (nmsparse bench masks): see
// docs/performance.md. On the 2-core development container (one thread, M weights/s): exact 2:4
// about 260, 4:8 37, 8:16 32, 16:32 25; LEMON 4:8 3.2, 8:16 2.4, 16:32 1.5.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/mask/transposable.h"

#if NMS_HAVE_LEMON
#include "testing/lemon_tile.h"
#endif

namespace nms {
namespace {

constexpr int64_t kSize = 1024;

// |Laplace(0, 1)| = Exponential(1) by inverse CDF.
Matrix laplace_scores(int64_t rows, int64_t cols) {
  Matrix a(rows, cols);
  const CounterRng rng(3, 4);
  for (int64_t k = 0; k < a.size(); ++k) {
    a.data()[k] = static_cast<float>(-std::log1p(-static_cast<double>(rng.uniform(k))));
  }
  return a;
}

void BM_TransposableExact(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const Matrix w = laplace_scores(kSize, kSize);
  for (auto _ : state) benchmark::DoNotOptimize(mask_transposable_exact(w.view(), p));
  state.SetItemsProcessed(state.iterations() * w.size());
}

void BM_TransposableGreedy(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  const Matrix w = laplace_scores(kSize, kSize);
  for (auto _ : state) benchmark::DoNotOptimize(mask_transposable_greedy(w.view(), p));
  state.SetItemsProcessed(state.iterations() * w.size());
}

#if NMS_HAVE_LEMON
void BM_TransposableLemon(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const Matrix w = laplace_scores(kSize, kSize);
  testing::LemonTileSolver solver(n, m);
  std::vector<int64_t> tile(static_cast<size_t>(m) * m);
  for (auto _ : state) {
    int64_t sum = 0;
    for (int64_t i0 = 0; i0 < kSize; i0 += m) {
      for (int64_t j0 = 0; j0 < kSize; j0 += m) {
        for (int r = 0; r < m; ++r) {
          for (int c = 0; c < m; ++c) {
            tile[static_cast<size_t>(r) * m + c] =
                std::llround(1e6 * static_cast<double>(w(i0 + r, j0 + c)));
          }
        }
        sum += solver.optimum(tile.data());
      }
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * w.size());
}
BENCHMARK(BM_TransposableLemon)
    ->Args({4, 8})
    ->Args({8, 16})
    ->Args({16, 32})
    ->Unit(benchmark::kMillisecond);
#endif

BENCHMARK(BM_TransposableExact)
    ->Args({2, 4})
    ->Args({4, 8})
    ->Args({8, 16})
    ->Args({16, 32})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TransposableGreedy)->Args({4, 8})->Args({16, 32})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
