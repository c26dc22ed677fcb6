// MVUE gradient pruning throughput: 2:4 MVUE + compression of an 8192 x 3072 fp32 gradient (dY of
// a 3072-wide layer over 8192 tokens), on one thread, timed alternately with a memcpy of the same
// matrix (the yardstick: the bandwidth a streaming pass can reach here). Counters: GB/s of fp32
// input for both, and the ratio. Run: build/bench/bench_grad --benchmark_min_time=2s
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>

#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/grad/prune.h"

namespace nms {
namespace {

constexpr int64_t kRows = 8192;
constexpr int64_t kCols = 3072;

Matrix make_gradient() {
  Matrix g(kRows, kCols);
  const CounterRng rng(1, 2);
  for (int64_t k = 0; k < g.size(); ++k) g.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return g;
}

// mode 0: compressed kRows; 1: compressed kCols (groups along tokens); 2: dense kRows;
// 3: dense kCols.
void BM_Mvue24(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const NmAxis axis = (mode & 1) ? NmAxis::kCols : NmAxis::kRows;
  const bool compressed = mode < 2;
  ScopedNumThreads threads(1);
  const Matrix g = make_gradient();
  Matrix dense(kRows, kCols);
  Matrix copy(kRows, kCols);
  CompressedNm c;
  GradPruneOptions o{GradMethod::kMvue, {2, 4}, axis, 42, tensor_stream_id("dY")};
  // Warm: buffers allocated and touched.
  grad_prune_compressed_into(g.view(), o, c);
  grad_prune_into(g.view(), o, dense.view());
  std::memcpy(copy.data(), g.data(), sizeof(float) * static_cast<size_t>(g.size()));
  double t_prune = 0.0;
  double t_copy = 0.0;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    o.seed += 1;
    const auto t0 = clock::now();
    if (compressed) {
      grad_prune_compressed_into(g.view(), o, c);
    } else {
      grad_prune_into(g.view(), o, dense.view());
    }
    const auto t1 = clock::now();
    std::memcpy(copy.data(), g.data(), sizeof(float) * static_cast<size_t>(g.size()));
    benchmark::ClobberMemory();
    const auto t2 = clock::now();
    const double p = std::chrono::duration<double>(t1 - t0).count();
    t_prune += p;
    t_copy += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(p);
  }
  const double bytes =
      static_cast<double>(g.size()) * sizeof(float) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = bytes / t_prune * 1e-9;
  state.counters["memcpy_GB/s"] = bytes / t_copy * 1e-9;
  state.counters["vs_memcpy"] = t_copy / t_prune;
  state.SetLabel(std::string(compressed ? "compressed " : "dense ") + std::string(axis_name(axis)));
}
BENCHMARK(BM_Mvue24)->DenseRange(0, 3)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
