// MVUE gradient pruning throughput: 2:4 MVUE + compression of an 8192 x 3072 fp32 gradient (dY of
// a 3072-wide layer over 8192 tokens) on one thread, timed alternately at the best ISA level, at
// the avx2 level and against a memcpy of the same matrix (the yardstick: the bandwidth a streaming
// pass reaches here); and MVUE of other patterns along tokens into the compressed form and into
// the weight-gradient kernel's lane form (BM_MvueTokens). Run: build/bench/bench_grad
// --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>

#include "grad/prune_lanes.h"
#include "kernels/nm_gemm_lanes_layout.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/isa.h"
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

// mode 0: compressed kRows; 1: compressed kCols (groups along tokens, what the weight-gradient
// GEMM consumes); 2: dense kRows; 3: dense kCols. Each iteration times, alternately, the pruner
// at the best ISA level, the pruner at the avx2 level (the SSE2 kernel) and a memcpy of the
// matrix; counters: GB/s of fp32 input for each, best / avx2 speedup, best / memcpy.
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
  const Isa best = isa_supported();
  const Isa base = best < Isa::kAvx2 ? best : Isa::kAvx2;
  using clock = std::chrono::steady_clock;
  const auto prune_seconds = [&](Isa isa) {
    ScopedIsa level(isa);
    o.seed += 1;
    const auto t0 = clock::now();
    if (compressed) {
      grad_prune_compressed_into(g.view(), o, c);
    } else {
      grad_prune_into(g.view(), o, dense.view());
    }
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Warm: buffers allocated and touched.
  prune_seconds(best);
  prune_seconds(base);
  std::memcpy(copy.data(), g.data(), sizeof(float) * static_cast<size_t>(g.size()));
  double t_best = 0.0;
  double t_base = 0.0;
  double t_copy = 0.0;
  for (auto _ : state) {
    const double p = prune_seconds(best);
    t_best += p;
    t_base += prune_seconds(base);
    const auto t1 = clock::now();
    std::memcpy(copy.data(), g.data(), sizeof(float) * static_cast<size_t>(g.size()));
    benchmark::ClobberMemory();
    t_copy += std::chrono::duration<double>(clock::now() - t1).count();
    state.SetIterationTime(p);
  }
  const double bytes =
      static_cast<double>(g.size()) * sizeof(float) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = bytes / t_best * 1e-9;
  state.counters["avx2_GB/s"] = bytes / t_base * 1e-9;
  state.counters["memcpy_GB/s"] = bytes / t_copy * 1e-9;
  state.counters["vs_avx2"] = t_base / t_best;
  state.counters["vs_memcpy"] = t_copy / t_best;
  state.SetLabel(std::string(compressed ? "compressed " : "dense ") + std::string(axis_name(axis)) +
                 ", " + std::string(isa_name(best)));
}
BENCHMARK(BM_Mvue24)->DenseRange(0, 3)->UseManualTime()->Unit(benchmark::kMillisecond);

// MVUE of kPatterns[range(0)] along tokens (the weight gradient's dY), one thread, at the best ISA
// level; each iteration times alternately the compressed form (grad_prune_compressed_into), the
// permute kernel's lane form where it applies (grad_prune_lanes; for 2:4 also its own kernel,
// grad_prune_lanes24) and a memcpy. Counters: ms of each, means over the iterations; the manual
// time is the compressed form's.
const NmPattern kPatterns[] = {{1, 2}, {1, 4}, {2, 4}, {4, 8}, {8, 16}, {16, 32}};

void BM_MvueTokens(benchmark::State& state) {
  const NmPattern pattern = kPatterns[state.range(0)];
  ScopedNumThreads threads(1);
  const Matrix g = make_gradient();
  Matrix copy(kRows, kCols);
  CompressedNm c;
  GradPruneOptions o{GradMethod::kMvue, pattern, NmAxis::kCols, 42, tensor_stream_id("dY")};
  const bool lanes = detail::grad_prune_lanes_applies(g.view(), o);
  const bool lanes24 = detail::grad_prune_lanes24_applies(g.view(), o);
  const detail::NmGemmLaneLayout lay(kCols, kRows, pattern.n, pattern.m);
  AlignedBuffer<float> values(lanes ? lay.total() : 0);
  AlignedBuffer<int32_t> index(lanes ? lay.total() : 0);
  using clock = std::chrono::steady_clock;
  const auto seconds = [](auto&& f) {
    const auto t0 = clock::now();
    f();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  grad_prune_compressed_into(g.view(), o, c);  // warm
  double t_compressed = 0.0;
  double t_lanes = 0.0;
  double t_lanes24 = 0.0;
  double t_copy = 0.0;
  for (auto _ : state) {
    o.seed += 1;
    const double p = seconds([&] { grad_prune_compressed_into(g.view(), o, c); });
    t_compressed += p;
    if (lanes) {
      t_lanes +=
          seconds([&] { detail::grad_prune_lanes(g.view(), o, values.data(), index.data()); });
    }
    if (lanes24) {
      t_lanes24 +=
          seconds([&] { detail::grad_prune_lanes24(g.view(), o, values.data(), index.data()); });
    }
    t_copy += seconds([&] {
      std::memcpy(copy.data(), g.data(), sizeof(float) * static_cast<size_t>(g.size()));
      benchmark::ClobberMemory();
    });
    state.SetIterationTime(p);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["compressed_ms"] = t_compressed / n * 1e3;
  if (lanes) state.counters["lanes_ms"] = t_lanes / n * 1e3;
  if (lanes24) state.counters["lanes24_ms"] = t_lanes24 / n * 1e3;
  state.counters["memcpy_ms"] = t_copy / n * 1e3;
  state.SetLabel(pattern.to_string() + ", " + std::string(isa_name(isa_active())));
}
BENCHMARK(BM_MvueTokens)->DenseRange(0, 5)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
