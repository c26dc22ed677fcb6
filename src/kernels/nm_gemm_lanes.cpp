// The permute form of nm_gemm (nm_gemm_lanes.h): which kernel runs, the lane form of a packed
// operand, and the threaded driver.
#include "kernels/nm_gemm_lanes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "core/parallel.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_bias.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {
namespace {

std::atomic<int> g_kernel_override{-1};  // -1: none; otherwise the NmGemmKernel value

NmGemmKernel kernel_default() {
  const char* env = std::getenv("NMSPARSE_NM_GEMM");
  if (env != nullptr && *env != '\0') {
    const std::optional<NmGemmKernel> k = nm_gemm_kernel_from_name(env);
    NMS_CHECK(k.has_value(), "NMSPARSE_NM_GEMM=", std::string(env),
              " is not one of broadcast, permute");
    return *k;
  }
#if defined(__x86_64__) || defined(__i386__)
  // bench_port_mix, one thread: on the AMD EPYC (Zen 4) loads mixed with permutes fed zmm FMAs at
  // 3.56-3.60 G/s against 3.6 from registers, and the permute kernel beat the broadcast one
  // (nm_gemm.h); on the Sapphire-Rapids-class Xeon every mix with permutes ran at or below the
  // load-fed rate and the permute kernel at 0.87x of OpenBLAS.
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd")) return NmGemmKernel::kPermute;
#endif
  return NmGemmKernel::kBroadcast;
}

// An environment switch between two settings: nullopt when `name` is unset or empty, whether it
// is `on` when it is one of the two, an error naming both otherwise.
std::optional<bool> env_switch(const char* name, const char* off, const char* off_means,
                               const char* on, const char* on_means) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string v(env);
  NMS_CHECK(v == off || v == on, name, "=", v, " is not ", off, " (", off_means, ") or ", on, " (",
            on_means, ")");
  return v == on;
}

std::atomic<int> g_pairs_override{-1};     // -1: none; 0 single panels; 1 pairs
std::atomic<int> g_stream_y_override{-1};  // -1: by size; 0 never; 1 always (aligned Y)
std::atomic<int> g_hybrid_override{-1};    // -1: the default; 0 permute-only; 1 hybrid

// The hybrid kernel for row-major Y (NmGemmLaneArgs::hybrid_pack). One thread, 2:4, ms permute-only
// -> hybrid, two alternating runs each (`NMSPARSE_NM_GEMM_HYBRID=0|1 nmsparse bench kernels
// --gemms forward`): T 8192 x 768 -> 3072 233.6-235.5 -> 225.9-228.5, 8192 x 3072 -> 768
// 238.3-242.1 -> 233.2-235.4, 2048^3 105.3-105.4 -> 100.2-102.4, 512 x 4096 -> 4096 105.6-106.9 ->
// 99.7-104.7; one run each at T 8192 x 768 -> 3072 / 2048^3: 1:2 236.5 / 105.2 -> 224.3 / 100.8,
// 4:8 237.4 / 105.6 -> 224.0 / 100.5, 8:16 251.2 / 105.1 -> 225.8 / 100.8, 1:4 127.7 / 56.3 ->
// 125.3 / 57.0. Work items of 128 tokens instead of 256: 237-247 / 236-252 / 104-105 / 104-105.
// NMSPARSE_NM_GEMM_HYBRID=0|1 overrides the default.
bool hybrid_default() {
  return env_switch("NMSPARSE_NM_GEMM_HYBRID", "0", "permute-only tiles", "1", "hybrid super-tiles")
      .value_or(true);
}

bool hybrid_active() {
  const int o = g_hybrid_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool chosen = hybrid_default();
  return chosen;
}

// Single token panels in the broadcast kernel on AMD CPUs. Zen 4, one thread, medians of
// alternating calls in one process, ms with pairs / single panels (2026-12-07): 16:32 2048^3
// 127.9 / 115.3, T 8192 x 768 -> 3072 287.0 / 260.1, T 8192 x 3072 -> 768 308.9 / 261.5, T 512 x
// 4096 -> 4096 131.0 / 116.3; 32:64 2048^3 123.7 / 114.9; 2:4 2048^3 (the broadcast kernel
// forced) 126.7 / 114.1; two threads 75.2 / 65.0 (2048^3) and 173.7 / 146.7 (8192 x 768 -> 3072).
// Standalone copies of the two micro-tiles with random 16:32 offsets ran at 2.45 (single) and 2.33
// (pair) G zmm FMAs/s, and at 2.48 / 2.56 with every operand row in L1: the extra broadcasts are
// not what limits them here (docs/performance.md).
bool panel_pairs_default() {
  const std::optional<bool> pairs =
      env_switch("NMSPARSE_NM_GEMM_PANELS", "1", "single token panels", "2", "pairs");
  if (pairs.has_value()) return *pairs;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd")) return false;
#endif
  return true;
}

// Tokens per work item of the permute driver: 256 (measured on a standalone copy of the kernel
// with K blocks of 128 chunks, one thread, Zen 4, 2:4: 64 tokens 1.45x, 128 1.48-1.55x, 256
// 1.51-1.60x of OpenBLAS).
constexpr int64_t kLaneTokenBlock = 256;

// A row-major Y of this many bytes or more is written with streaming stores: twice the 32 MB L3
// of the development Zen 4, so the lines a next layer reads first (its first tokens) are gone
// from the caches by the end either way, and the stores skip their reads for ownership. One
// thread, 2:4, T 8192 x 768 -> 3072 (Y 96 MiB; a copy of the kernel in one process, alternating,
// medians of 5): 245-249 -> 237 ms.
constexpr int64_t kLaneStreamYBytes = int64_t{64} << 20;

}  // namespace

std::string_view nm_gemm_kernel_name(NmGemmKernel kernel) {
  return kernel == NmGemmKernel::kPermute ? "permute" : "broadcast";
}

std::optional<NmGemmKernel> nm_gemm_kernel_from_name(std::string_view name) {
  for (NmGemmKernel k : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
    if (nm_gemm_kernel_name(k) == name) return k;
  }
  return std::nullopt;
}

NmGemmKernel nm_gemm_kernel_active() {
  const int o = g_kernel_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<NmGemmKernel>(o);
  static const NmGemmKernel chosen = kernel_default();
  return chosen;
}

NmGemmKernel nm_gemm_kernel_in_use() {
  return isa_active() == Isa::kAvx512 ? nm_gemm_kernel_active() : NmGemmKernel::kBroadcast;
}

void set_nm_gemm_kernel(std::optional<NmGemmKernel> kernel) {
  g_kernel_override.store(kernel ? static_cast<int>(*kernel) : -1, std::memory_order_relaxed);
}

ScopedNmGemmKernel::ScopedNmGemmKernel(NmGemmKernel kernel) {
  const int o = g_kernel_override.load(std::memory_order_relaxed);
  if (o >= 0) previous_ = static_cast<NmGemmKernel>(o);
  set_nm_gemm_kernel(kernel);
}

ScopedNmGemmKernel::~ScopedNmGemmKernel() {
  set_nm_gemm_kernel(previous_);
}

namespace detail {

bool nm_gemm_panel_pairs() {
  const int o = g_pairs_override.load(std::memory_order_relaxed);
  if (o >= 0) return o != 0;
  static const bool chosen = panel_pairs_default();
  return chosen;
}

void set_nm_gemm_panel_pairs_override(int pairs) {
  g_pairs_override.store(pairs < 0 ? -1 : pairs != 0 ? 1 : 0, std::memory_order_relaxed);
}

void set_nm_gemm_lanes_hybrid_override(int hybrid) {
  g_hybrid_override.store(hybrid < 0 ? -1 : hybrid != 0 ? 1 : 0, std::memory_order_relaxed);
}

void set_nm_gemm_lanes_stream_y_override(int stream) {
  g_stream_y_override.store(stream < 0 ? -1 : stream != 0 ? 1 : 0, std::memory_order_relaxed);
}

bool nm_gemm_lanes_for(NmPattern pattern) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  return isa_active() == Isa::kAvx512 && nm_gemm_kernel_active() == NmGemmKernel::kPermute &&
         kLaneChunk % pattern.m == 0;
#else
  (void)pattern;
  return false;
#endif
}

void nm_gemm_lanes_from_entries(NmGemmOperand& a) {
  const NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m, a.depth_block);
  bool shared = false;  // some tile of 2 or more real rows keeps the same columns
  for (int64_t tile = 0; tile < lay.tiles && !shared; ++tile) {
    if (a.rows - tile * kNmGemmTileRows < 2) break;
    for (int64_t db = 0; db < lay.depth_blocks; ++db) {
      shared = shared || a.shared.data()[db * lay.tiles + tile] != 0;
    }
  }
  if (!nm_gemm_lanes_for(a.pattern) || shared) {
    a.lane_values = AlignedBuffer<float>();
    a.lane_index = AlignedBuffer<int32_t>();
    return;
  }
  const NmGemmLaneLayout lanes(a.rows, a.depth, a.pattern.n, a.pattern.m);
  if (a.lane_values.size() != lanes.total()) {
    a.lane_values.resize_for_overwrite(lanes.total());
    a.lane_index.resize_for_overwrite(lanes.total());
  }
  // Slot by slot, the block's 32 rows side by side: two contiguous 128-byte writes per slot, read
  // from the (at most 7) tiles the block spans, each a stream of 12-float steps (row by row, with
  // a 128-byte stride per slot, it was 1.6x slower).
  const int64_t slots_total = lanes.chunks * lanes.slots_per_chunk;
  parallel_for(lanes.blocks, [&](int64_t b) {
    float* values = a.lane_values.data() + lanes.offset(b, 0, 0);
    int32_t* index = a.lane_index.data() + lanes.offset(b, 0, 0);
    const int64_t real = std::min<int64_t>(kLaneRows, a.rows - b * kLaneRows);
    const float* src[kLaneRows];  // row l's entry of the current slot
    for (int64_t db = 0; db < lay.depth_blocks; ++db) {
      const int64_t first = lay.block_first_slot(db);
      for (int64_t l = 0; l < real; ++l) {
        const int64_t r = b * kLaneRows + l;
        src[l] = a.packed.data() + lay.entry(r / kNmGemmTileRows, first, r % kNmGemmTileRows);
      }
      const int32_t col0 = static_cast<int32_t>(db * lay.depth_block);
      // Slot g of the row is slot g mod slots_per_chunk of chunk g / slots_per_chunk: relative
      // to the block, at g · 32 + l.
      for (int64_t g = first; g < lay.block_last_slot(db); ++g) {
        float* v = values + g * kLaneRows;
        int32_t* x = index + g * kLaneRows;
        for (int64_t l = 0; l < real; ++l) {
          int32_t offset;
          std::memcpy(&offset, src[l] + 1, sizeof(offset));
          v[l] = src[l][0];
          x[l] = (col0 + offset / static_cast<int32_t>(kNmGemmPanel)) % kLaneChunk;
          src[l] += 2 * kNmGemmTileRows;
        }
        for (int64_t l = real; l < kLaneRows; ++l) {  // padding rows
          v[l] = 0.0f;
          x[l] = 0;
        }
      }
    }
    // Slots of a partial last chunk past the row's slots: never read, zeroed.
    std::fill(values + lay.slots_per_row * kLaneRows, values + slots_total * kLaneRows, 0.0f);
    std::fill(index + lay.slots_per_row * kLaneRows, index + slots_total * kLaneRows, 0);
  });
  a.packed = AlignedBuffer<float>();
  a.shared = AlignedBuffer<uint8_t>();
}

void nm_gemm_lanes_scalar(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                          const float* bias) {
  const NmGemmLaneLayout lanes(a.rows, a.depth, a.pattern.n, a.pattern.m);
  const int64_t slots = a.depth / a.pattern.m * a.pattern.n;
  parallel_for(x.rows(), [&](int64_t t) {
    const float* xr = x.row(t);
    for (int64_t r = 0; r < a.rows; ++r) {
      const int64_t at = lanes.offset(r / kLaneRows, 0, 0) + r % kLaneRows;
      float acc = 0.0f;
      for (int64_t g = 0; g < slots; ++g) {
        const int64_t col =
            g / lanes.slots_per_chunk * kLaneChunk + a.lane_index.data()[at + g * kLaneRows];
        acc = std::fma(xr[col], a.lane_values.data()[at + g * kLaneRows], acc);
      }
      y(t, r) = acc;
    }
    add_bias(y.data(), y.ld(), t, t + 1, 0, a.rows, bias);
  });
}

void nm_gemm_lanes_run(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                       const float* bias) {
  NmGemmLaneArgs args;
  args.x = x.data();
  args.ldx = x.ld();
  args.values = a.lane_values.data();
  args.lanes = a.lane_index.data();
  args.rows = a.rows;
  args.depth = a.depth;
  args.n = a.pattern.n;
  args.m = a.pattern.m;
  args.y = y.data();
  args.ldy = y.ld();
  args.bias = bias;
  const int o = g_stream_y_override.load(std::memory_order_relaxed);
  args.y_stream = (o >= 0 ? o == 1 : y.rows() * y.ld() * int64_t{4} >= kLaneStreamYBytes) &&
                  reinterpret_cast<uintptr_t>(y.data()) % 64 == 0 && y.ld() % 16 == 0;
  args.hybrid_pack = hybrid_active();
  nm_gemm_lanes_run(args, x.rows());
}

void nm_gemm_lanes_run(const NmGemmLaneArgs& args, int64_t tokens) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  const NmGemmLaneLayout lay(args.rows, args.depth, args.n, args.m);
  const bool hybrid = args.x_panels != nullptr || args.hybrid_pack;
  const int64_t block = hybrid ? kLaneHybridTokenBlock : kLaneTokenBlock;
  const int64_t token_blocks = (tokens + block - 1) / block;
  // Row parts when the token blocks alone would leave threads idle (at least 2 items per thread;
  // every item owns its block of Y, so results do not depend on the split).
  const int64_t threads = max_threads();
  const int64_t row_parts =
      std::clamp<int64_t>((2 * threads + token_blocks - 1) / token_blocks, 1, lay.blocks);
  parallel_for(token_blocks * row_parts, [&](int64_t i) {
    const int64_t tb = i / row_parts;
    const int64_t part = i % row_parts;
    const int64_t t0 = tb * block;
    const int64_t t1 = std::min(tokens, t0 + block);
    const int64_t b0 = part * lay.blocks / row_parts;
    const int64_t b1 = (part + 1) * lay.blocks / row_parts;
    nm_gemm_lanes_avx512(args, t0, t1, b0, b1);
  });
#else
  (void)args, (void)tokens;
  NMS_THROW("nm_gemm: the permute kernel is built on x86-64 only");
#endif
}

}  // namespace detail
}  // namespace nms
