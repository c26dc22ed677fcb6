// nm_gemm (forward Y = X Wᵀ and backward-data dX = dY W with N:M operands) against OpenBLAS
// cblas_sgemm on the masked dense matrices: each iteration times the dense call and ours
// alternately, same thread count; counters are the medians, their ratio, the packing time of the
// sparse operand (per-step cost of a changing mask) and the relative Frobenius error against the
// dense product. Run: build/bench/bench_nm_gemm --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "bench_util.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/mask/standard.h"

namespace nms {
namespace {

Matrix transpose(const Matrix& a) {
  Matrix t(a.cols(), a.rows());
  for (int64_t r = 0; r < a.rows(); ++r)
    for (int64_t c = 0; c < a.cols(); ++c) t(c, r) = a(r, c);
  return t;
}

const NmPattern kPatterns[] = {{2, 4}, {1, 4}, {4, 8}, {8, 16}, {16, 32}};
struct Shape {
  int64_t tokens, in, out;
};
// The tuned transformer shapes, then training-layer shapes whose packed operand does not fit the
// caches (4096 -> 4096 at 2:4: 64 MB; nm_gemm.h's row chunks x panel groups), then the vision
// transformer's MLP layers (width 192, 50 tokens x 128 images): a short reduction dimension.
const Shape kShapes[] = {{8192, 768, 3072}, {8192, 3072, 768},  {2048, 2048, 2048},
                         {512, 4096, 4096}, {2048, 1024, 1024}, {512, 784, 4096},
                         {6400, 192, 768},  {6400, 768, 192}};

// args: gemm (0 forward, 1 backward-data), pattern, shape, threads.
void BM_NmGemm(benchmark::State& state) {
  const bool backward = state.range(0) == 1;
  const NmPattern p = kPatterns[state.range(1)];
  const Shape s = kShapes[state.range(2)];
  const int threads = static_cast<int>(state.range(3));
  ScopedNumThreads scoped(threads);
  openblas_set_num_threads(threads);
  // W [out, in]; forward: N:M along in (rows of W); backward-data: N:M along out (rows of Wᵀ).
  Matrix w = bench::uniform_matrix(s.out, s.in, 1);
  Matrix wt = transpose(w);
  const NmAxis axis = backward ? NmAxis::kCols : NmAxis::kRows;
  if (backward) {
    apply_mask(wt.view(), mask_nm_magnitude(wt.view(), p));
    w = transpose(wt);
  } else {
    apply_mask(w.view(), mask_nm_magnitude(w.view(), p));
  }
  const CompressedNm comp = nm_compress(w.view(), p, axis);
  NmGemmOperand a = nm_gemm_pack(comp);
  // forward: x [T, in] -> y [T, out]; backward-data: dy [T, out] -> dx [T, in].
  const int64_t k_dim = backward ? s.out : s.in;
  const int64_t r_dim = backward ? s.in : s.out;
  const Matrix x = bench::uniform_matrix(s.tokens, k_dim, 2);
  Matrix y_dense(s.tokens, r_dim);
  Matrix y_sparse(s.tokens, r_dim);
  using clock = std::chrono::steady_clock;
  const auto dense_call = [&] {
    if (backward) {  // dX = dY · W
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.tokens),
                  static_cast<int>(s.in), static_cast<int>(s.out), 1.0f, x.data(),
                  static_cast<int>(s.out), w.data(), static_cast<int>(s.in), 0.0f, y_dense.data(),
                  static_cast<int>(s.in));
    } else {  // Y = X · Wᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.tokens),
                  static_cast<int>(s.out), static_cast<int>(s.in), 1.0f, x.data(),
                  static_cast<int>(s.in), w.data(), static_cast<int>(s.in), 0.0f, y_dense.data(),
                  static_cast<int>(s.out));
    }
  };
  dense_call();
  nm_gemm(x.view(), a, y_sparse.view());
  std::vector<double> t_dense;
  std::vector<double> t_sparse;
  std::vector<double> t_pack;
  for (auto _ : state) {
    bench::settle(threads);
    auto t0 = clock::now();
    dense_call();
    auto t1 = clock::now();
    bench::settle(threads);
    auto t1b = clock::now();
    nm_gemm(x.view(), a, y_sparse.view());
    auto t2 = clock::now();
    nm_gemm_pack_into(comp, a);
    auto t3 = clock::now();
    t_dense.push_back(std::chrono::duration<double>(t1 - t0).count());
    t_sparse.push_back(std::chrono::duration<double>(t2 - t1b).count());
    t_pack.push_back(std::chrono::duration<double>(t3 - t2).count());
    state.SetIterationTime(t_sparse.back());
  }
  const double dense_ms = bench::median(t_dense) * 1e3;
  const double sparse_ms = bench::median(t_sparse) * 1e3;
  state.counters["dense_ms"] = dense_ms;
  state.counters["sparse_ms"] = sparse_ms;
  state.counters["pack_ms"] = bench::median(t_pack) * 1e3;
  state.counters["speedup"] = dense_ms / sparse_ms;
  state.counters["max_rel_error"] = bench::max_rel_error(y_sparse, y_dense);
  state.SetLabel(std::string(backward ? "backward_data " : "forward ") + p.to_string() + " T" +
                 std::to_string(s.tokens) + " " + std::to_string(s.in) + "->" +
                 std::to_string(s.out) + " " + std::string(isa_name(isa_active())));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int shape = 0; shape < 8; ++shape) b->Args({0, 0, shape, threads});
    for (int pattern = 1; pattern < 5; ++pattern) b->Args({0, pattern, 0, threads});
    for (int shape : {0, 1, 3, 5, 6, 7}) b->Args({1, 0, shape, threads});
  }
}
BENCHMARK(BM_NmGemm)->Apply(Args)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
