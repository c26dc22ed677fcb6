// nm_gemm_bf16 (Y = X · Wᵀ, X and the N:M weight in bf16, fp32 accumulation) against the dense
// baselines, alternately in one process at the same thread count: OpenBLAS cblas_sgemm on the
// masked fp32 matrices (the baseline of the fp32 kernels), the fp32 N:M kernel nm_gemm on the same
// operand, and, when LibTorch is built, its dense bf16 torch::mm (oneDNN, vdpbf16ps). Counters:
// medians in ms (dense_ms, fp32_ms, bf16_ms, torch_bf16_ms; bf16_from_fp32_ms: the same kernel
// reading fp32 X and rounding it as it loads) and the ratios speedup = dense_ms /
// bf16_ms, speedup_fp32 = dense_ms / fp32_ms, speedup_torch_bf16 = torch_bf16_ms / bf16_ms;
// max_rel_error = max |ours − fp32 dense| / max |fp32 dense| (bf16 inputs: about 2⁻⁸ relative);
// pack_fp32_ms / pack_bf16_ms: packing each operand from W and its mask (a training step's cost,
// nm_gemm_pack_masked_into / nm_gemm_bf16_pack_masked_into); pack_t_*: the same for Wᵀ straight
// from W (the *_transposed_into packers), with an N:M mask of Wᵀ along out; pack_t_bf16_copy_ms:
// the bf16 one's former route, transpose_into into a copy then the masked pack. Every pack is a
// full one: the operands' record of their last mask is cleared first (a repack from the same mask
// writes the values only, as a transposable layer's held mask does between refreshes).
// Run (on a quiet machine, `uptime` load < 1):
//   build/bench/bench_nm_gemm_bf16 --benchmark_min_time=1
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <string>
#include <vector>

#if defined(NMS_BENCH_TORCH)
#include <torch/torch.h>
#endif

#include "bench_util.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/kernels/transpose.h"
#include "nmsparse/mask/standard.h"

namespace nms {
namespace {

const NmPattern kPatterns[] = {{2, 4}, {1, 4}, {4, 8}, {8, 16}};
struct Shape {
  int64_t tokens, in, out;
};
// The kernel issue's transformer shapes, the training MLP's hidden layer, the ViT's MLP layer.
const Shape kShapes[] = {
    {8192, 768, 3072}, {8192, 3072, 768}, {2048, 2048, 2048}, {512, 4096, 4096}, {6400, 192, 768}};

// x rounded to bf16 and back: the fp32 baselines get exactly the inputs the bf16 kernel sees.
std::vector<uint16_t> round_to_bf16(Matrix& m) {
  std::vector<uint16_t> bits(static_cast<size_t>(m.size()));
  for (int64_t i = 0; i < m.size(); ++i) {
    bits[static_cast<size_t>(i)] = f32_to_bf16(m.data()[i]);
    m.data()[i] = bf16_to_f32(bits[static_cast<size_t>(i)]);
  }
  return bits;
}

double seconds_of(const std::chrono::steady_clock::time_point& t0,
                  const std::chrono::steady_clock::time_point& t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// args: pattern, shape, threads.
void BM_NmGemmBf16(benchmark::State& state) {
  const NmPattern p = kPatterns[state.range(0)];
  const Shape s = kShapes[state.range(1)];
  const int threads = static_cast<int>(state.range(2));
  if (!nm_gemm_bf16_kernel_active()) {
    state.SkipWithError("this CPU lacks AVX512_BF16 (or NMSPARSE_ISA is below avx512)");
    return;
  }
  ScopedNumThreads scoped(threads);
  openblas_set_num_threads(threads);
  Matrix w = bench::uniform_matrix(s.out, s.in, 1);
  const BitMask mask = mask_nm_magnitude(w.view(), p);
  apply_mask(w.view(), mask);
  const std::vector<uint16_t> w_bits = round_to_bf16(w);
  Matrix x = bench::uniform_matrix(s.tokens, s.in, 2);
  const std::vector<uint16_t> x_bits = round_to_bf16(x);
  const CompressedNm comp = nm_compress(w.view(), p);
  NmGemmOperand a32 = nm_gemm_pack(comp);
  NmGemmBf16Operand a16 = nm_gemm_bf16_pack(comp);
  const MatrixView<const uint16_t> x16(x_bits.data(), s.tokens, s.in);
  Matrix y_dense(s.tokens, s.out);
  Matrix y32(s.tokens, s.out);
  Matrix y16(s.tokens, s.out);
  const auto dense_call = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(s.tokens),
                static_cast<int>(s.out), static_cast<int>(s.in), 1.0f, x.data(),
                static_cast<int>(s.in), w.data(), static_cast<int>(s.in), 0.0f, y_dense.data(),
                static_cast<int>(s.out));
  };
#if defined(NMS_BENCH_TORCH)
  at::set_num_threads(threads);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
  const torch::Tensor xt =
      torch::from_blob(const_cast<uint16_t*>(x_bits.data()), {s.tokens, s.in}, bf16);
  const torch::Tensor wt =
      torch::from_blob(const_cast<uint16_t*>(w_bits.data()), {s.out, s.in}, bf16);
  torch::Tensor yt = torch::empty({s.tokens, s.out}, bf16);
  const auto torch_call = [&] { torch::mm_out(yt, xt, wt.t()); };
#else
  const auto torch_call = [] {};
#endif
  dense_call();
  nm_gemm(x.view(), a32, y32.view());
  nm_gemm_bf16(x16, a16, y16.view());
  torch_call();
  std::vector<double> t_dense, t32, t16, t16_from32, t_torch, t_pack32, t_pack16, t_packt32,
      t_packt16, t_packt16_copy;
  Matrix w_copy(s.in, s.out);
  NmGemmBf16Operand a16t_copy;
  // Wᵀ's operand (backward-data) with an N:M mask of its own along out.
  Matrix w_t(s.in, s.out);
  transpose_into(w.view(), w_t.view());
  const BitMask mask_t = mask_nm_magnitude(w_t.view(), p);
  NmGemmOperand a32t;
  NmGemmBf16Operand a16t;
  Matrix y16_from32(s.tokens, s.out);
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    bench::settle(threads);
    const auto t0 = clock::now();
    dense_call();
    const auto t1 = clock::now();
    bench::settle(threads);
    const auto t2 = clock::now();
    nm_gemm(x.view(), a32, y32.view());
    const auto t3 = clock::now();
    bench::settle(threads);
    const auto t4 = clock::now();
    nm_gemm_bf16(x16, a16, y16.view());
    const auto t5 = clock::now();
    nm_gemm_bf16(x.view(), a16, y16_from32.view());
    const auto t5b = clock::now();
    t16_from32.push_back(seconds_of(t5, t5b));
    bench::settle(threads);
    for (BitMask* held : {&a32.lane_mask, &a16.index_mask, &a32t.lane_mask, &a16t.index_mask,
                          &a16t_copy.index_mask}) {
      held->fill(false);  // full packs below (the storage kept: no allocation in them)
    }
    const auto t6 = clock::now();
    torch_call();
    const auto t7 = clock::now();
    nm_gemm_pack_masked_into(w.view(), mask, p, a32);
    const auto t8 = clock::now();
    nm_gemm_bf16_pack_masked_into(w.view(), mask, p, a16);
    const auto t9 = clock::now();
    nm_gemm_pack_masked_transposed_into(w.view(), {}, mask_t, p, a32t);
    const auto t10 = clock::now();
    nm_gemm_bf16_pack_masked_transposed_into(w.view(), {}, mask_t, p, a16t);
    const auto t11 = clock::now();
    transpose_into(w.view(), w_copy.view());
    nm_gemm_bf16_pack_masked_into(w_copy.view(), mask_t, p, a16t_copy);
    t_packt16_copy.push_back(seconds_of(t11, clock::now()));
    t_pack32.push_back(seconds_of(t7, t8));
    t_pack16.push_back(seconds_of(t8, t9));
    t_packt32.push_back(seconds_of(t9, t10));
    t_packt16.push_back(seconds_of(t10, t11));
    t_dense.push_back(seconds_of(t0, t1));
    t32.push_back(seconds_of(t2, t3));
    t16.push_back(seconds_of(t4, t5));
    t_torch.push_back(seconds_of(t6, t7));
    state.SetIterationTime(t16.back());
  }
  const double dense_ms = bench::median(t_dense) * 1e3;
  const double fp32_ms = bench::median(t32) * 1e3;
  const double bf16_ms = bench::median(t16) * 1e3;
  state.counters["dense_ms"] = dense_ms;
  state.counters["fp32_ms"] = fp32_ms;
  state.counters["bf16_ms"] = bf16_ms;
  state.counters["bf16_from_fp32_ms"] = bench::median(t16_from32) * 1e3;
  state.counters["pack_fp32_ms"] = bench::median(t_pack32) * 1e3;
  state.counters["pack_bf16_ms"] = bench::median(t_pack16) * 1e3;
  state.counters["pack_t_fp32_ms"] = bench::median(t_packt32) * 1e3;
  state.counters["pack_t_bf16_ms"] = bench::median(t_packt16) * 1e3;
  state.counters["pack_t_bf16_copy_ms"] = bench::median(t_packt16_copy) * 1e3;
  state.counters["speedup"] = dense_ms / bf16_ms;
  state.counters["speedup_fp32"] = dense_ms / fp32_ms;
#if defined(NMS_BENCH_TORCH)
  const double torch_ms = bench::median(t_torch) * 1e3;
  state.counters["torch_bf16_ms"] = torch_ms;
  state.counters["speedup_torch_bf16"] = torch_ms / bf16_ms;
#endif
  state.counters["max_rel_error"] = bench::max_rel_error(y16, y_dense);
  state.SetLabel(p.to_string() + " T" + std::to_string(s.tokens) + " " + std::to_string(s.in) +
                 "->" + std::to_string(s.out));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int shape = 0; shape < 5; ++shape) b->Args({0, shape, threads});
    for (int pattern = 1; pattern < 4; ++pattern) b->Args({pattern, 0, threads});
  }
}
BENCHMARK(BM_NmGemmBf16)->Apply(Args)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
