// Standard N:M mask + pack throughput (issue target: 2:4 mask + pack of a 4096 x 4096 fp32 matrix
// at >= 2 GB/s of input per thread). Single thread; bytes_per_second counts fp32 input bytes.
//
//   build/bench/bench_mask_pack --benchmark_filter=MaskPack --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_enable_random_interleaving=true
//
// A plain memcpy of the same matrix is timed alternately in the same process as the bandwidth
// yardstick: the ratio MaskPack / Copy is the figure that survives a noisy shared machine.
#include <benchmark/benchmark.h>

#include <cstring>
#include <utility>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/transpose.h"
#include "nmsparse/mask/standard.h"

namespace nms {
namespace {

Matrix random_matrix(int64_t rows, int64_t cols) {
  Matrix a(rows, cols);
  const CounterRng rng(1, 2);
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = 2.0f * rng.uniform(k) - 1.0f;
  return a;
}

void set_bytes(benchmark::State& state, const Matrix& w) {
  state.SetBytesProcessed(state.iterations() * w.size() * static_cast<int64_t>(sizeof(float)));
}

void BM_Mask(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const Matrix w = random_matrix(state.range(0), state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(mask_nm_magnitude(w.view(), p));
  set_bytes(state, w);
}

void BM_MaskPack(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const Matrix w = random_matrix(state.range(0), state.range(0));
  for (auto _ : state) {
    const BitMask mask = mask_nm_magnitude(w.view(), p);
    benchmark::DoNotOptimize(nm_compress_masked(w.view(), mask, p));
  }
  set_bytes(state, w);
}

// Steady state of a training loop: the compressed operand is re-packed into the same buffers
// every step (nm_compress_masked_into reuses them), so only the mask is allocated per iteration.
void BM_MaskPackReuse(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const Matrix w = random_matrix(state.range(0), state.range(0));
  CompressedNm packed;
  for (auto _ : state) {
    const BitMask mask = mask_nm_magnitude(w.view(), p);
    nm_compress_masked_into(w.view(), mask, p, NmAxis::kRows, packed);
    benchmark::DoNotOptimize(packed.values.data());
  }
  set_bytes(state, w);
}

// Packing alone into reused buffers: from the mask (nm_compress_masked_into) and from a matrix
// whose zeros are the pruned entries (nm_compress_into).
void BM_PackMaskedReuse(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const Matrix w = random_matrix(state.range(0), state.range(0));
  const BitMask mask = mask_nm_magnitude(w.view(), p);
  CompressedNm packed;
  for (auto _ : state) {
    nm_compress_masked_into(w.view(), mask, p, NmAxis::kRows, packed);
    benchmark::DoNotOptimize(packed.values.data());
  }
  set_bytes(state, w);
}

void BM_PackReuse(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p =
      NmPattern::make(static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  Matrix w = random_matrix(state.range(0), state.range(0));
  apply_mask(w.view(), mask_nm_magnitude(w.view(), p));
  CompressedNm packed;
  for (auto _ : state) {
    nm_compress_into(w.view(), p, NmAxis::kRows, packed);
    benchmark::DoNotOptimize(packed.values.data());
  }
  set_bytes(state, w);
}

// Two masks that differ in one group (row 0's first), so that packing them in turn packs the
// lanes each time: a mask that changes every step (Bi-Mask, SR-STE).
std::pair<BitMask, BitMask> mask_pair(const Matrix& a, NmPattern p) {
  BitMask first = mask_nm_magnitude(a.view(), p);
  BitMask second = first;
  for (int64_t c = 0; c < p.m; ++c) second.set(0, c, !first.get(0, c) && c < p.n);
  return {std::move(first), std::move(second)};
}

// nm_gemm's operand straight from W and its mask, in the form of each kernel (arg 1: 0 broadcast
// entries, 1 permute lanes): the training layers' per-step packing of W. Arg 2: 0 a new mask each
// time, 1 the same mask (a transposable layer's held mask: the lane form rewrites its values only).
void BM_NmGemmPackMasked(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p{2, 4};
  const Matrix w = random_matrix(state.range(0), state.range(0));
  const auto [mask, other] = mask_pair(w, p);
  ScopedNmGemmKernel kernel(state.range(1) == 1 ? NmGemmKernel::kPermute
                                                : NmGemmKernel::kBroadcast);
  const bool held = state.range(2) == 1;
  NmGemmOperand op;
  int64_t call = 0;
  for (auto _ : state) {
    nm_gemm_pack_masked_into(w.view(), held || call++ % 2 == 0 ? mask : other, p, op);
    benchmark::DoNotOptimize(op.lane_values.data());
    benchmark::DoNotOptimize(op.packed.data());
  }
  set_bytes(state, w);
}

// The backward-data operand (P W)ᵀ each step (arg 1: 0 transpose_into then pack, 1 packed from W
// through the register-transposed stage; arg 2: 1 with a row permutation, as Bi-Mask; arg 3: the
// form, 0 the broadcast kernel's entries, 1 the permute kernel's lanes; arg 4: 1 the same mask
// each time, 0 two masks in turn).
void BM_NmGemmPackTransposed(benchmark::State& state) {
  set_num_threads(1);
  const NmPattern p{2, 4};
  const int64_t k = state.range(0);
  const Matrix w = random_matrix(k, k);
  std::vector<int64_t> order;
  if (state.range(2) == 1) {
    for (int64_t i = 0; i < k; ++i) order.push_back((i * 769) % k);  // 769 prime: a permutation
  }
  Matrix t(k, k);
  transpose_into(w.view(), t.view(), order);
  const auto [mask_t, other_t] = mask_pair(t, p);
  ScopedNmGemmKernel kernel(state.range(3) == 0 ? NmGemmKernel::kBroadcast
                                                : NmGemmKernel::kPermute);
  const bool held = state.range(4) == 1;
  NmGemmOperand op;
  int64_t call = 0;
  for (auto _ : state) {
    const BitMask& m = held || call++ % 2 == 0 ? mask_t : other_t;
    if (state.range(1) == 0) {
      transpose_into(w.view(), t.view(), order);
      nm_gemm_pack_masked_into(t.view(), m, p, op);
    } else {
      nm_gemm_pack_masked_transposed_into(w.view(), order, m, p, op);
    }
    benchmark::DoNotOptimize(op.packed.data());
    benchmark::DoNotOptimize(op.lane_values.data());
  }
  set_bytes(state, w);
}

void BM_Copy(benchmark::State& state) {
  const Matrix w = random_matrix(state.range(0), state.range(0));
  Matrix dst(w.rows(), w.cols());
  for (auto _ : state) {
    std::memcpy(dst.data(), w.data(), static_cast<size_t>(w.size()) * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_bytes(state, w);
}

void patterns(benchmark::internal::Benchmark* b) {
  for (const auto& [n, m] : {std::pair{2, 4}, {1, 4}, {4, 8}, {8, 16}, {16, 32}})
    b->Args({4096, n, m});
}

BENCHMARK(BM_Copy)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mask)->Apply(patterns)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskPack)->Apply(patterns)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaskPackReuse)->Apply(patterns)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PackMaskedReuse)->Apply(patterns)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PackReuse)->Apply(patterns)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NmGemmPackMasked)
    ->ArgsProduct({{4096}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NmGemmPackTransposed)
    ->ArgsProduct({{4096}, {0, 1}, {0, 1}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nms

BENCHMARK_MAIN();
