// Instruction-mix ceilings of the N:M kernels on this CPU: zmm FMAs per second when each FMA is fed
// from registers only (the dense peak), from its own 64-byte L1 load (the token-vectorised
// kernels nm_gemm and nm_wgrad use), from its own lane permute (the output-vectorised kernel of
// research/kernels.md), and mixes of the last two (the "hybrid" kernel, which measured 93 % of
// peak on a Zen 4). Counter `GFMA`: billions of zmm FMAs per second.
//
//   bench_port_mix --benchmark_min_time=0.5
//
// Measured on the development Xeon (Sapphire-Rapids class VM, one thread; docs/performance.md):
// registers only 7.5 G/s, one load per FMA 4.8 G/s, one permute per FMA 3.4 G/s, mixes of loads
// and permutes 4.5-4.8 G/s: a zmm permute and a zmm FMA share port 5 here, so mixing them does not
// lift the load-bound kernels.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
// GCC 12's _mm512_undefined_ps (inside _mm512_permutexvar_ps) self-initialises on purpose and
// trips -Wuninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kIterations = 1 << 20;

__attribute__((target("avx512f"))) double lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  double sum = 0.0;
  for (float x : lanes) sum += x;
  return sum;
}

// Per iteration: kLoads FMAs with a memory operand (rows of a 32 KB L1 buffer) and kPermutes FMAs
// fed by vpermps of a vector loaded once per 4 permutes. Independent accumulators throughout.
// kLoadsPerWeight > 0: the load-fed FMAs' other operand is a weight broadcast from L1
// (vbroadcastss) once per kLoadsPerWeight of them, as the hybrid kernel's slot does (one per 2); 0:
// a register.
template <int kLoads, int kPermutes, int kLoadsPerWeight = 0>
__attribute__((target("avx512f"))) double fma_mix(const float* buffer) {
  __m512 acc[kLoads > 0 ? kLoads : 1];
  __m512 pacc[kPermutes > 0 ? kPermutes : 1];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (auto& a : pacc) a = _mm512_setzero_ps();
  const __m512 w = _mm512_set1_ps(1e-7f);
  __m512i index[4];
  for (int j = 0; j < 4; ++j) index[j] = _mm512_set1_epi32(3 * j + 1);
  for (int64_t it = 0; it < kIterations; ++it) {
    const float* row = buffer + (it & 31) * 16;
    __asm__("" : "+r"(row));  // no hoisting across iterations
    __m512 wl = w;
#pragma GCC unroll 32
    for (int i = 0; i < kLoads; ++i) {
      if (kLoadsPerWeight > 0 && i % kLoadsPerWeight == 0) wl = _mm512_set1_ps(row[2048 + i]);
      acc[i] = _mm512_fmadd_ps(wl, _mm512_load_ps(row + 16 * (i % 8) + 512 * (i / 8)), acc[i]);
    }
    __m512 x = _mm512_setzero_ps();
#pragma GCC unroll 32
    for (int i = 0; i < kPermutes; ++i) {
      if (i % 4 == 0) x = _mm512_load_ps(row + 4096 + 16 * (i / 4));
      pacc[i] = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(index[i % 4], x), pacc[i]);
    }
  }
  __m512 total = _mm512_setzero_ps();
  for (int i = 0; i < kLoads; ++i) total = _mm512_add_ps(total, acc[i]);
  for (int i = 0; i < kPermutes; ++i) total = _mm512_add_ps(total, pacc[i]);
  return lane_sum(total);
}

// 12 independent register-only FMA chains (latency 4, two FMA pipes: enough to fill both).
__attribute__((target("avx512f"))) double fma_registers() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.9999f);
  const __m512 c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  __m512 total = _mm512_setzero_ps();
  for (int i = 0; i < 12; ++i) total = _mm512_add_ps(total, acc[i]);
  return lane_sum(total);
}

// The bf16 kernel's pair (nm_gemm_bf16): each vdpbf16ps (two products per fp32 lane, 32 per
// instruction) fed by a vpermw of a vector loaded once per 4 permutes, as fma_mix's permute-fed
// FMAs. Counted as zmm FMA-class instructions: on Zen 4 the pair ran at 2.5 G/s against 2.6 G/s
// for vpermps + FMA, so twice the products per second.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) double dpbf16_permute_fed(
    const float* buffer) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh w = (__m512bh)_mm512_set1_epi32(0x33D633D6);  // bf16 1e-7 twice
  __m512i index[4];
  for (int j = 0; j < 4; ++j) index[j] = _mm512_set1_epi16(static_cast<short>(5 * j + 1));
  for (int64_t it = 0; it < kIterations; ++it) {
    const float* row = buffer + (it & 31) * 16;
    __asm__("" : "+r"(row));
    __m512i x = _mm512_setzero_si512();
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      if (i % 4 == 0) x = _mm512_load_si512(row + 4096 + 16 * (i / 4));
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_permutexvar_epi16(index[i % 4], x), w);
    }
  }
  __m512 total = _mm512_setzero_ps();
  for (int i = 0; i < 12; ++i) total = _mm512_add_ps(total, acc[i]);
  return lane_sum(total);
}

// A 32-column chunk (what a 16:32 group spans) in the permute kernel's form: kPermutes FMAs per
// iteration each fed by a two-source vpermi2ps of the chunk's two X vectors, its index reloaded per
// permute (the instruction overwrites it; a register copy of it instead ran at 1.85 G/s), and
// kLoads FMAs with a memory operand, as a hybrid 16:32 kernel would mix them. On Zen 4 the
// permute-fed ones alone ran at 1.9-2.0 G/s against 2.7 G/s for vpermps + FMA; 8 + 8 at 2.74 G/s,
// 12 loads + 6 permutes at 2.92 G/s, against 3.56-3.65 G/s for the same mixes with vpermps
// (docs/performance.md: why 16:32 stays on the broadcast kernel).
template <int kLoads, int kPermutes>
__attribute__((target("avx512f"))) double permute2_mix(const float* buffer) {
  __m512 acc[kLoads + kPermutes];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 w = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kIterations; ++it) {
    const float* row = buffer + (it & 31) * 16;
    __asm__("" : "+r"(row));
    const __m512 lo = _mm512_load_ps(row + 4096);
    const __m512 hi = _mm512_load_ps(row + 4096 + 16);
#pragma GCC unroll 16
    for (int i = 0; i < kPermutes; ++i) {
      __m512 p;
      // The index from memory each time (the permute replaces it), as the kernel would load it.
      __asm__ volatile(
          "vmovdqa32 %c[off](%[idx]), %[p]\n\tvpermi2ps %[hi], %[lo], %[p]"
          : [p] "=&v"(p)
          : [idx] "r"(row + 2048), [off] "i"(64 * (i % 4)), [lo] "v"(lo), [hi] "v"(hi));
      acc[i] = _mm512_fmadd_ps(w, p, acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < kLoads; ++i) {
      acc[kPermutes + i] = _mm512_fmadd_ps(w, _mm512_load_ps(row + 16 * (i % 8) + 512 * (i / 8)),
                                           acc[kPermutes + i]);
    }
  }
  __m512 total = _mm512_setzero_ps();
  for (auto& a : acc) total = _mm512_add_ps(total, a);
  return lane_sum(total);
}

bool have_avx512() {
  return __builtin_cpu_supports("avx512f");
}

void run(benchmark::State& state, double (*body)(const float*), int fmas_per_iteration) {
  if (!have_avx512()) {
    state.SkipWithError("needs AVX-512F");
    return;
  }
  std::vector<float> storage(8192 + 16, 1e-3f);
  auto* buffer =
      reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63});
  for (auto _ : state) benchmark::DoNotOptimize(body(buffer));
  state.counters["GFMA"] = benchmark::Counter(
      static_cast<double>(kIterations) * fmas_per_iteration * 1e-9 * state.iterations(),
      benchmark::Counter::kIsRate);
}

template <int kLoads, int kPermutes, int kLoadsPerWeight = 0>
void BM_FmaMix(benchmark::State& state) {
  run(state, fma_mix<kLoads, kPermutes, kLoadsPerWeight>, kLoads + kPermutes);
}

void BM_FmaRegisters(benchmark::State& state) {
  run(
      state, [](const float*) { return fma_registers(); }, 12);
}

void BM_FmaPermute2Fed(benchmark::State& state) {
  run(state, permute2_mix<0, 12>, 12);
}

template <int kLoads, int kPermutes>
void BM_Permute2Mix(benchmark::State& state) {
  run(state, permute2_mix<kLoads, kPermutes>, kLoads + kPermutes);
}

void BM_Bf16PermuteFed(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    state.SkipWithError("needs AVX512_BF16");
    return;
  }
  run(state, dpbf16_permute_fed, 12);
}

BENCHMARK(BM_FmaRegisters);
BENCHMARK(BM_FmaMix<24, 0>)->Name("BM_FmaLoadFed");
BENCHMARK(BM_FmaMix<0, 12>)->Name("BM_FmaPermuteFed");
BENCHMARK(BM_FmaPermute2Fed);
BENCHMARK(BM_Permute2Mix<8, 8>)->Name("BM_Permute2Mix/loads8/permutes8");
BENCHMARK(BM_Permute2Mix<12, 6>)->Name("BM_Permute2Mix/loads12/permutes6");
BENCHMARK(BM_FmaMix<16, 4>)->Name("BM_FmaMix/loads16/permutes4");
BENCHMARK(BM_FmaMix<16, 8>)->Name("BM_FmaMix/loads16/permutes8");
BENCHMARK(BM_FmaMix<12, 12>)->Name("BM_FmaMix/loads12/permutes12");
BENCHMARK(BM_FmaMix<8, 8>)->Name("BM_FmaMix/loads8/permutes8");
BENCHMARK(BM_FmaMix<8, 8, 2>)->Name("BM_FmaMix/loads8/permutes8/weight_per2");
BENCHMARK(BM_FmaMix<12, 8, 3>)->Name("BM_FmaMix/loads12/permutes8/weight_per3");
BENCHMARK(BM_Bf16PermuteFed);

}  // namespace
#endif

BENCHMARK_MAIN();
