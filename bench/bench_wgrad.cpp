// nm_wgrad (weight gradient dW = dYᵀ X, dY pruned N:M along tokens by MVUE) against OpenBLAS
// cblas_sgemm on the masked dense dY: each iteration times the dense call and ours alternately,
// same thread count. Counters (medians over iterations): dense_ms; sparse_ms (nm_wgrad from the
// compressed dY: decoding dYᵀ and packing X are inside, fused per K-block); prune_ms (MVUE +
// compression of dY, grad_prune_compressed_into); speedup = dense / sparse, speedup_best = best
// dense / best sparse, speedup_prune = dense / (sparse + prune); max_rel_error = max |ours − dense|
// / max |dense|.
// The fourth argument picks the kernel (NmWgradKernel: 0 auto, 1 panels, 2 gemm, 3 permute);
// BM_NmWgradKernels runs each explicitly on the 2:4 shapes and the other patterns' first shape.
// Run (on a quiet machine, `uptime` load < 1):
//   build/bench/bench_wgrad --benchmark_min_time=0.5
//   build/bench/bench_wgrad --benchmark_filter=Kernels --benchmark_min_time=0.5
//   build/bench/bench_wgrad --benchmark_filter=Bf16 --benchmark_min_time=0.5
//   build/bench/bench_wgrad --benchmark_filter='Bf16Pruned/[0-6]/1/' --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_wgrad.h"
#include "nmsparse/kernels/nm_wgrad_bf16.h"

namespace nms {
namespace {

double best(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// Per iteration, each call once in order (bench::settle before each), timed; returns each call's
// median in ms. The iteration's manual time is call `reported`'s.
std::vector<double> alternate_medians_ms(benchmark::State& state, int threads,
                                         const std::vector<std::function<void()>>& calls,
                                         size_t reported) {
  using clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> times(calls.size());
  for (const auto& call : calls) call();  // warm: buffers touched, workspaces sized
  for (auto _ : state) {
    for (size_t k = 0; k < calls.size(); ++k) {
      bench::settle(threads);
      const auto t0 = clock::now();
      calls[k]();
      times[k].push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    state.SetIterationTime(times[reported].back());
  }
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(bench::median(t) * 1e3);
  return medians;
}

const NmPattern kPatterns[] = {{2, 4}, {1, 4}, {8, 16}, {4, 8}};
struct Shape {
  int64_t tokens, in, out;
};
// out x in at T: 3072x768 and 768x3072 at T = 8192, 2048x2048 at T = 2048; the hidden layers of
// the training benchmark's MLP (784-4096-4096-10, batch 512); the vision transformer's MLP layers
// (width 192, 50 tokens x 128 images).
const Shape kShapes[] = {{8192, 768, 3072}, {8192, 3072, 768}, {2048, 2048, 2048},
                         {512, 4096, 4096}, {512, 784, 4096},  {6400, 192, 768},
                         {6400, 768, 192}};
constexpr int kShapeCount = 7;

// args: pattern, shape, threads, kernel.
void BM_NmWgrad(benchmark::State& state) {
  const NmPattern p = kPatterns[state.range(0)];
  const Shape s = kShapes[state.range(1)];
  const int threads = static_cast<int>(state.range(2));
  const auto kernel = static_cast<NmWgradKernel>(state.range(3));
  ScopedNumThreads scoped(threads);
  openblas_set_num_threads(threads);
  const Matrix g = bench::uniform_matrix(s.tokens, s.out, 1);  // dY [T, out] before pruning
  const GradPruneOptions options{GradMethod::kMvue, p, NmAxis::kCols, /*seed=*/3, /*stream=*/1};
  CompressedNm dy = grad_prune_compressed(g.view(), options);
  const Matrix dy_dense = nm_decompress(dy);  // masked dense dY
  const Matrix x = bench::uniform_matrix(s.tokens, s.in, 2);
  Matrix dw_dense(s.out, s.in);
  Matrix dw_sparse(s.out, s.in);
  NmWgradWorkspace ws;
  using clock = std::chrono::steady_clock;
  const auto dense_call = [&] {  // dW = dYᵀ · X
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(s.out),
                static_cast<int>(s.in), static_cast<int>(s.tokens), 1.0f, dy_dense.data(),
                static_cast<int>(s.out), x.data(), static_cast<int>(s.in), 0.0f, dw_dense.data(),
                static_cast<int>(s.in));
  };
  dense_call();
  nm_wgrad(dy, x.view(), dw_sparse.view(), &ws, nullptr, kernel);
  std::vector<double> t_dense;
  std::vector<double> t_sparse;
  std::vector<double> t_prune;
  for (auto _ : state) {
    bench::settle(threads);
    const auto t0 = clock::now();
    dense_call();
    const auto t1 = clock::now();
    bench::settle(threads);
    const auto t1b = clock::now();
    nm_wgrad(dy, x.view(), dw_sparse.view(), &ws, nullptr, kernel);
    const auto t2 = clock::now();
    grad_prune_compressed_into(g.view(), options, dy);
    const auto t3 = clock::now();
    t_dense.push_back(std::chrono::duration<double>(t1 - t0).count());
    t_sparse.push_back(std::chrono::duration<double>(t2 - t1b).count());
    t_prune.push_back(std::chrono::duration<double>(t3 - t2).count());
    state.SetIterationTime(t_sparse.back());
  }
  const double dense_ms = bench::median(t_dense) * 1e3;
  const double sparse_ms = bench::median(t_sparse) * 1e3;
  const double prune_ms = bench::median(t_prune) * 1e3;
  state.counters["dense_ms"] = dense_ms;
  state.counters["sparse_ms"] = sparse_ms;
  state.counters["prune_ms"] = prune_ms;
  state.counters["speedup"] = dense_ms / sparse_ms;
  state.counters["speedup_best"] = best(t_dense) / best(t_sparse);
  state.counters["speedup_prune"] = dense_ms / (sparse_ms + prune_ms);
  state.counters["max_rel_error"] = bench::max_rel_error(dw_sparse, dw_dense);
  const char* names[] = {"auto", "panels", "gemm", "permute"};
  state.SetLabel(p.to_string() + " T" + std::to_string(s.tokens) + " " + std::to_string(s.out) +
                 "x" + std::to_string(s.in) + " " + std::string(isa_name(isa_active())) + " " +
                 names[state.range(3)]);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int shape = 0; shape < kShapeCount; ++shape) b->Args({0, shape, threads, 0});
    for (int pattern = 1; pattern < 4; ++pattern) b->Args({pattern, 0, threads, 0});
  }
}
BENCHMARK(BM_NmWgrad)->Apply(Args)->UseManualTime()->Unit(benchmark::kMillisecond);

void KernelArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < kShapeCount; ++shape) {
    for (int kernel = 1; kernel <= 3; ++kernel) b->Args({0, shape, 1, kernel});
  }
  for (int pattern = 1; pattern < 4; ++pattern) {
    for (int kernel = 1; kernel <= 3; ++kernel) b->Args({pattern, 0, 1, kernel});
  }
}
void BM_NmWgradKernels(benchmark::State& state) {
  BM_NmWgrad(state);
}
BENCHMARK(BM_NmWgradKernels)->Apply(KernelArgs)->UseManualTime()->Unit(benchmark::kMillisecond);

// The SR-STE decay term λ (1 − M) ⊙ W that a training layer's weight gradient starts from (its
// fused start term; NmWgradDecay), one thread: nm_wgrad without and with it, alternately in one
// process. Counters: plain_ms, decay_ms and their difference decay_cost_ms (medians). arg: shape.
void BM_NmWgradDecay(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  ScopedNumThreads scoped(1);
  const GradPruneOptions options{GradMethod::kMvue,
                                 {2, 4},
                                 NmAxis::kCols,
                                 /*seed=*/3,
                                 /*stream=*/1};
  const CompressedNm dy =
      grad_prune_compressed(bench::uniform_matrix(s.tokens, s.out, 1).view(), options);
  const Matrix x = bench::uniform_matrix(s.tokens, s.in, 2);
  const Matrix w = bench::uniform_matrix(s.out, s.in, 3);
  std::vector<uint8_t> keep(static_cast<size_t>(s.out * s.in));
  const CounterRng rng(4, 0);
  for (size_t k = 0; k < keep.size(); ++k) keep[k] = rng.uniform_double(k) < 0.5 ? 1 : 0;
  const NmWgradDecay decay{w.view(), keep.data(), s.in, 2e-4f};
  Matrix dw(s.out, s.in);
  NmWgradWorkspace ws;
  const std::vector<double> ms =
      alternate_medians_ms(state, 1,
                           {[&] { nm_wgrad(dy, x.view(), dw.view(), &ws); },
                            [&] { nm_wgrad(dy, x.view(), dw.view(), &ws, &decay); }},
                           1);
  state.counters["plain_ms"] = ms[0];
  state.counters["decay_ms"] = ms[1];
  state.counters["decay_cost_ms"] = ms[1] - ms[0];
  state.SetLabel("2:4 T" + std::to_string(s.tokens) + " " + std::to_string(s.out) + "x" +
                 std::to_string(s.in) + " " + std::string(isa_name(isa_active())));
}
BENCHMARK(BM_NmWgradDecay)
    ->DenseRange(0, kShapeCount - 1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// nm_wgrad_bf16 (bf16 dY and X, fp32 accumulation) against sgemm and nm_wgrad (fp32) on the same
// pruned dY, the three timed alternately. Counters (medians): dense_ms, fp32_ms, bf16_ms (packing
// dYᵀ and rounding Xᵀ included, MVUE excluded), speedup = dense / bf16, speedup_fp32 = dense /
// fp32, max_rel_error against sgemm on the fp32 inputs (bf16 rounding: ~1e-3). args: shape,
// threads.
void BM_NmWgradBf16(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  ScopedNumThreads scoped(threads);
  openblas_set_num_threads(threads);
  const GradPruneOptions options{GradMethod::kMvue,
                                 {2, 4},
                                 NmAxis::kCols,
                                 /*seed=*/3,
                                 /*stream=*/1};
  const CompressedNm dy =
      grad_prune_compressed(bench::uniform_matrix(s.tokens, s.out, 1).view(), options);
  const Matrix dy_dense = nm_decompress(dy);
  const Matrix x = bench::uniform_matrix(s.tokens, s.in, 2);
  Matrix dw_dense(s.out, s.in);
  Matrix dw_fp32(s.out, s.in);
  Matrix dw_bf16(s.out, s.in);
  NmWgradWorkspace ws;
  NmWgradBf16Workspace ws_bf16;
  const auto dense_call = [&] {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(s.out),
                static_cast<int>(s.in), static_cast<int>(s.tokens), 1.0f, dy_dense.data(),
                static_cast<int>(s.out), x.data(), static_cast<int>(s.in), 0.0f, dw_dense.data(),
                static_cast<int>(s.in));
  };
  const std::vector<double> ms =
      alternate_medians_ms(state, threads,
                           {dense_call, [&] { nm_wgrad(dy, x.view(), dw_fp32.view(), &ws); },
                            [&] { nm_wgrad_bf16(dy, x.view(), dw_bf16.view(), &ws_bf16); }},
                           2);
  state.counters["dense_ms"] = ms[0];
  state.counters["fp32_ms"] = ms[1];
  state.counters["bf16_ms"] = ms[2];
  state.counters["speedup"] = ms[0] / ms[2];
  state.counters["speedup_fp32"] = ms[0] / ms[1];
  state.counters["max_rel_error"] = bench::max_rel_error(dw_bf16, dw_dense);
  state.SetLabel("2:4 T" + std::to_string(s.tokens) + " " + std::to_string(s.out) + "x" +
                 std::to_string(s.in) + (nm_gemm_bf16_kernel_active() ? " avx512bf16" : " scalar"));
}
BENCHMARK(BM_NmWgradBf16)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kShapeCount - 1, 1), {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// MVUE of dY and nm_wgrad_bf16, fused (nm_wgrad_bf16_pruned: at 2:4 the MVUE kernel writes the
// bf16 operand of dYᵀ) against unfused (grad_prune_compressed_into, then nm_wgrad_bf16 packs the
// compressed dY), alternately, with SR-STE's decay as a training layer runs it. Counters
// (medians): fused_ms, unfused_ms, gain = unfused / fused. args: shape, threads.
void BM_NmWgradBf16Pruned(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  ScopedNumThreads scoped(threads);
  const GradPruneOptions options{GradMethod::kMvue,
                                 {2, 4},
                                 NmAxis::kCols,
                                 /*seed=*/3,
                                 /*stream=*/1};
  const Matrix g = bench::uniform_matrix(s.tokens, s.out, 1);
  const Matrix x = bench::uniform_matrix(s.tokens, s.in, 2);
  const Matrix w = bench::uniform_matrix(s.out, s.in, 3);
  std::vector<uint8_t> keep(static_cast<size_t>(s.out * s.in));
  const CounterRng rng(4, 0);
  for (size_t k = 0; k < keep.size(); ++k) keep[k] = rng.uniform_double(k) < 0.5 ? 1 : 0;
  const NmWgradDecay decay{w.view(), keep.data(), s.in, 2e-4f};
  Matrix dw(s.out, s.in);
  NmWgradBf16Workspace fused_ws;
  NmWgradBf16Workspace unfused_ws;
  CompressedNm pruned;
  const std::vector<double> ms = alternate_medians_ms(
      state, threads,
      {[&] { nm_wgrad_bf16_pruned(g.view(), options, x.view(), dw.view(), &fused_ws, &decay); },
       [&] {
         grad_prune_compressed_into(g.view(), options, pruned);
         nm_wgrad_bf16(pruned, x.view(), dw.view(), &unfused_ws, &decay);
       }},
      0);
  state.counters["fused_ms"] = ms[0];
  state.counters["unfused_ms"] = ms[1];
  state.counters["gain"] = ms[1] / ms[0];
  state.SetLabel("2:4 T" + std::to_string(s.tokens) + " " + std::to_string(s.out) + "x" +
                 std::to_string(s.in));
}
BENCHMARK(BM_NmWgradBf16Pruned)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kShapeCount - 1, 1), {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
