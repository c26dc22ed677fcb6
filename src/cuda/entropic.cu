// The entropic transposable solver on the GPU (TSENOR-style; the maths, the rounding and the
// defaults are those of src/mask/transposable_entropic.cpp).
//
// LAYOUT. One warp lane owns one row of an m x m tile, so a warp holds 32 / m tiles (m a power of
// two, 2..32). A lane keeps its row of logS, logQ and the row's exps in registers (3m floats; at
// m = 32 the kernel needs no local memory, ptxas -v).
//   - Row projection: lane-local (max, m exps, one log).
//   - Column sums: a butterfly reduce-scatter inside the tile's lanes: m - 1 shuffles leave the
//     sum of column i in the lane of row i. Then one log, and m shuffles broadcast the column
//     shifts. The CPU's log-domain fallback for a column sum that underflows (< 1e-30) is kept: a
//     warp vote, then per column a segment max and sum.
//   - Per sweep and lane: m exps, 2 logs, 2m - 1 shuffles, about 6m flops; at 16:32, 300 sweeps
//     of ~300 instructions per tile, about 6e11 warp instructions for LLaMA-3-8B's 6.8 M tiles
//     (an estimate). Measured on an H200: 3.15 s for those tiles, sweeps, rounding and local
//     search together, against 52.7 s for the exact solver (docs/performance.md).
// ROUNDING. Greedy by descending logS, ties to the lower flat index i * m + j, as on the CPU, done
//   as "repeatedly keep the best entry whose row and column both hold < n": eligibility only
//   shrinks, so this keeps exactly the set that the sorted pass keeps. Each pick is a segment
//   argmax (log2 m shuffle rounds).
// LOCAL SEARCH. The CPU's swap rule on the device (see the kernel), at most L swaps per tile.
//   Without it 71 % of LLaMA-3-8B's 16:32 tiles were short after rounding, and finishing them
//   on the host took 87 s (one thread).
// REPAIR. Tiles still short are listed; the host runs the CPU's augmenting-path repair on them
//   (detail::entropic_finish_tiles, OpenMP), so every tile keeps exactly n like the CPU's.
// DIFFERENCES FROM THE CPU. __expf / __logf and the summation order differ from the CPU's float
//   sweeps, so fractional values differ in the last bits and a near-tie in the rounding can
//   resolve differently: the masks are not bit-identical to mask_transposable_entropic; cuda_test
//   bounds the objective difference.
#include <cuda_runtime.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <vector>

#include "cuda/cuda_support.h"
#include "cuda/launch.h"
#include "mask/entropic_finish.h"
#include "nmsparse/cuda/cuda.h"

namespace nms::cuda {
namespace detail {
namespace {

constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kThreads = 128;
constexpr float kTinyColumnSum = 1e-30f;  // as the CPU solver

template <int kM>
__device__ inline float segment_max(float v) {
  for (int off = kM / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, off));
  return v;
}

template <int kM>
__device__ inline float segment_sum(float v) {
  for (int off = kM / 2; off > 0; off /= 2) v += __shfl_xor_sync(kFullWarp, v, off);
  return v;
}

// Reduce-scatter of the tile's m x m values e (lane of row r holds e[0..m) of row r): returns,
// in the lane of row r, the sum over rows of column r. Destroys e. At each level the lane keeps
// the half of its vector whose column bit equals its own row bit and adds its partner's copy.
template <int kHalf, int kM>
__device__ inline void column_sum_level(float (&e)[kM], int row) {
  const bool upper = (row & kHalf) != 0;
#pragma unroll
  for (int k = 0; k < kHalf; ++k) {
    const float lo = e[k];
    const float hi = e[k + kHalf];
    e[k] = (upper ? hi : lo) + __shfl_xor_sync(kFullWarp, upper ? lo : hi, kHalf);
  }
  // One template level per halving keeps every index a constant: a run-time loop over the levels
  // put e in local memory at m = 32 (128-byte stack frame, ptxas -v).
  if constexpr (kHalf > 1) column_sum_level<kHalf / 2>(e, row);
}

template <int kM>
__device__ inline float column_sum_to_row_lane(float (&e)[kM], int row) {
  if constexpr (kM > 1) column_sum_level<kM / 2>(e, row);
  return e[0];
}

// The OR of the segments (tiles) of a warp-wide ballot, in segment bit numbering.
template <int kM>
__device__ inline uint32_t fold_segments(uint32_t ballot, uint32_t segment_bits) {
  uint32_t folded = 0;
#pragma unroll
  for (int shift = 0; shift < 32; shift += kM) folded |= (ballot >> shift) & segment_bits;
  return folded;
}

template <int kM>
__global__ void __launch_bounds__(kThreads)
    entropic_tiles(const float* scores, int64_t ld, int n, int64_t tiles, int64_t tiles_per_row,
                   float tau, int sweeps, int local_search_steps, uint64_t* tile_bits,
                   int64_t* unfinished, EntropicCounters* counters) {
  constexpr int kTilesPerWarp = 32 / kM;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int row = lane % kM;
  const int base = lane - row;  // first lane of this tile
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp * kTilesPerWarp >= tiles) return;  // warp-uniform
  const int64_t t = warp * kTilesPerWarp + lane / kM;
  const bool active = t < tiles;
  const int64_t ti = active ? t / tiles_per_row : 0;
  const int64_t tj = active ? t % tiles_per_row : 0;

  float s[kM];
  float q[kM];
  float e[kM];
  float mx = 0.0f;
  const float* a = scores + (ti * kM + row) * ld + tj * kM;
#pragma unroll
  for (int j = 0; j < kM; ++j) {
    s[j] = active ? a[j] : 0.0f;
    mx = fmaxf(mx, s[j]);
  }
  mx = segment_max<kM>(mx);
  // All-zero tile (or n == m): the circulant mask, as on the CPU. Inactive tiles take this path.
  const bool trivial = mx == 0.0f || n == kM;
  const float inv_max = trivial ? 0.0f : 1.0f / mx;
#pragma unroll
  for (int j = 0; j < kM; ++j) {
    s[j] = tau * (s[j] * inv_max);
    q[j] = 0.0f;
  }
  const float log_n = logf(static_cast<float>(n));
  const float real_n = static_cast<float>(n);
  for (int sweep = 0; sweep < sweeps; ++sweep) {
    float rmx = s[0];
#pragma unroll
    for (int j = 1; j < kM; ++j) rmx = fmaxf(rmx, s[j]);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      e[j] = __expf(s[j] - rmx);
      sum += e[j];
    }
    const float shift = rmx + __logf(sum) - log_n;
    const float scale = real_n / sum;
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      s[j] -= shift;
      e[j] *= scale;
    }
    float col = column_sum_to_row_lane<kM>(e, row);
    const bool tiny = !(col > kTinyColumnSum);
    if (__any_sync(kFullWarp, tiny)) {  // rare: log-domain logsumexp of the underflowed columns
      float lse = 0.0f;
#pragma unroll
      for (int j = 0; j < kM; ++j) {
        const float cm = segment_max<kM>(s[j]);
        const float cs = segment_sum<kM>(__expf(s[j] - cm));
        if (row == j) lse = cm + __logf(cs);
      }
      col = tiny ? lse - log_n : __logf(col) - log_n;
    } else {
      col = __logf(col) - log_n;
    }
#pragma unroll
    for (int j = 0; j < kM; ++j) {
      const float c = __shfl_sync(kFullWarp, col, base + j);
      const float y = (s[j] - c) + q[j];
      s[j] = fminf(y, 0.0f);
      q[j] = y - s[j];
    }
  }

  uint32_t keep = 0;  // bit j: (row, j) kept
  int row_count = 0;
  int col_count = 0;  // of column `row`
  if (trivial) {
    for (int k = 0; k < n; ++k) keep |= 1u << ((row + k) % kM);
    row_count = n;
    col_count = n;
  }
  const uint32_t segment_bits = kM == 32 ? kFullWarp : (1u << kM) - 1u;
  uint32_t full_cols = trivial ? segment_bits : 0u;
  for (;;) {
    float best = 0.0f;
    int key = INT_MAX;  // flat index of the best eligible entry; INT_MAX: none
    if (row_count < n) {
#pragma unroll
      for (int j = 0; j < kM; ++j) {
        const bool eligible = !(((keep | full_cols) >> j) & 1u);
        if (eligible && (key == INT_MAX || s[j] > best)) {
          best = s[j];
          key = row * kM + j;
        }
      }
    }
#pragma unroll
    for (int off = kM / 2; off > 0; off /= 2) {
      const float other_best = __shfl_xor_sync(kFullWarp, best, off);
      const int other_key = __shfl_xor_sync(kFullWarp, key, off);
      if (other_key != INT_MAX &&
          (key == INT_MAX || other_best > best || (other_best == best && other_key < key))) {
        best = other_best;
        key = other_key;
      }
    }
    if (!__any_sync(kFullWarp, key != INT_MAX)) break;
    if (key != INT_MAX) {
      const int pick_row = key / kM;
      const int pick_col = key % kM;
      if (row == pick_row) {
        keep |= 1u << pick_col;
        ++row_count;
      }
      if (row == pick_col) ++col_count;
    }
    full_cols = (__ballot_sync(kFullWarp, col_count >= n) >> base) & segment_bits;
  }

  // Local search, the CPU's rule: at most local_search_steps swaps; each takes, over the short
  // rows i and short columns j (ascending), the first maximum positive gain
  // A[i,j2] + A[i2,j] - A[i2,j2] with (i2,j2) kept and (i,j2), (i2,j) not, in double on the raw
  // scores as on the CPU; lanes are the i2, so each (i, j) costs m doubles per lane and one
  // segment argmax. Row i's scores reach every lane by m shuffles; a run-time column index is
  // read by an unrolled select, keeping the rows in registers.
  int swaps = 0;
#pragma unroll
  for (int j = 0; j < kM; ++j) e[j] = active ? a[j] : 0.0f;  // the raw row again
  bool stalled = trivial;
  for (int step = 0; step < local_search_steps; ++step) {
    const uint32_t short_rows = (__ballot_sync(kFullWarp, row_count < n) >> base) & segment_bits;
    const uint32_t short_cols = (__ballot_sync(kFullWarp, col_count < n) >> base) & segment_bits;
    const bool searching = !stalled && short_rows != 0 && short_cols != 0;
    const uint32_t warp_rows =
        fold_segments<kM>(__ballot_sync(kFullWarp, searching && row_count < n), segment_bits);
    const uint32_t warp_cols =
        fold_segments<kM>(__ballot_sync(kFullWarp, searching && col_count < n), segment_bits);
    if (warp_rows == 0 || warp_cols == 0) break;  // warp-uniform
    double best_gain = 0.0;
    int best_i = -1;
    int best_j = -1;
    int best_i2 = -1;
    int best_j2 = -1;
    for (uint32_t rows_left = warp_rows; rows_left != 0; rows_left &= rows_left - 1) {
      const int i = __ffs(static_cast<int>(rows_left)) - 1;
      const uint32_t keep_i = __shfl_sync(kFullWarp, keep, base + i);
#pragma unroll
      for (int j2 = 0; j2 < kM; ++j2) s[j2] = __shfl_sync(kFullWarp, e[j2], base + i);
      for (uint32_t cols_left = warp_cols; cols_left != 0; cols_left &= cols_left - 1) {
        const int j = __ffs(static_cast<int>(cols_left)) - 1;
        const bool pair = searching && ((short_rows >> i) & 1u) && ((short_cols >> j) & 1u);
        double gain = 0.0;
        int lane_j2 = -1;
        if (pair && !((keep >> j) & 1u)) {
          float own_j = 0.0f;
#pragma unroll
          for (int jj = 0; jj < kM; ++jj) own_j = jj == j ? e[jj] : own_j;
#pragma unroll
          for (int j2 = 0; j2 < kM; ++j2) {
            if (((keep >> j2) & 1u) && !((keep_i >> j2) & 1u)) {
              const double g = (static_cast<double>(s[j2]) + static_cast<double>(own_j)) -
                               static_cast<double>(e[j2]);
              if (g > gain) {
                gain = g;
                lane_j2 = j2;
              }
            }
          }
        }
        int lane_i2 = lane_j2 >= 0 ? row : -1;
#pragma unroll
        for (int off = kM / 2; off > 0; off /= 2) {
          const double other_gain = __shfl_xor_sync(kFullWarp, gain, off);
          const int other_i2 = __shfl_xor_sync(kFullWarp, lane_i2, off);
          const int other_j2 = __shfl_xor_sync(kFullWarp, lane_j2, off);
          if (other_i2 >= 0 &&
              (lane_i2 < 0 || other_gain > gain || (other_gain == gain && other_i2 < lane_i2))) {
            gain = other_gain;
            lane_i2 = other_i2;
            lane_j2 = other_j2;
          }
        }
        if (lane_i2 >= 0 && gain > best_gain) {
          best_gain = gain;
          best_i = i;
          best_j = j;
          best_i2 = lane_i2;
          best_j2 = lane_j2;
        }
      }
    }
    if (best_i < 0) {
      stalled = true;  // no positive swap: this tile's search ends, as on the CPU
      continue;
    }
    ++swaps;
    if (row == best_i) {
      keep |= 1u << best_j2;
      ++row_count;
    }
    if (row == best_i2) keep = (keep | (1u << best_j)) & ~(1u << best_j2);
    if (row == best_j) ++col_count;
  }

  const uint32_t exact_lanes = __ballot_sync(kFullWarp, row_count == n && col_count == n);
  const bool exactly_n = ((exact_lanes >> base) & segment_bits) == segment_bits;
  if (!active) return;
  tile_bits[(ti * kM + row) * tiles_per_row + tj] = keep;
  if (row == 0) {
    if (!trivial) atomicAdd(&counters->nontrivial, 1ull);
    if (swaps > 0) atomicAdd(&counters->swaps, static_cast<unsigned long long>(swaps));
    if (!exactly_n) unfinished[atomicAdd(&counters->unfinished, 1ull)] = t;
  }
}

// Copies the scores and mask rows of the listed tiles into a dense [count][m][m] / [count][m]
// buffer (gather), or writes the rows back (scatter). One thread per (tile, row).
__global__ void gather_tiles(const float* scores, int64_t ld, int m, int64_t tiles_per_row,
                             const int64_t* list, int64_t count, const uint64_t* tile_bits,
                             float* out_scores, uint64_t* out_bits) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count * m) return;
  const int64_t tile = list[t / m];
  const int r = static_cast<int>(t % m);
  const int64_t ti = tile / tiles_per_row;
  const int64_t tj = tile % tiles_per_row;
  const float* src = scores + (ti * m + r) * ld + tj * m;
  for (int j = 0; j < m; ++j) out_scores[t * m + j] = src[j];
  out_bits[t] = tile_bits[(ti * m + r) * tiles_per_row + tj];
}

__global__ void scatter_tiles(const uint64_t* bits, int m, int64_t tiles_per_row,
                              const int64_t* list, int64_t count, uint64_t* tile_bits) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count * m) return;
  const int64_t tile = list[t / m];
  const int r = static_cast<int>(t % m);
  tile_bits[((tile / tiles_per_row) * m + r) * tiles_per_row + tile % tiles_per_row] = bits[t];
}

template <int kM>
void launch_entropic_m(const float* scores, int64_t tiles, int64_t tiles_per_row, int64_t ld, int n,
                       const EntropicOptions& o, uint64_t* tile_bits, int64_t* unfinished,
                       EntropicCounters* counters) {
  const int64_t warps = (tiles + 32 / kM - 1) / (32 / kM);
  entropic_tiles<kM><<<blocks_for(warps * 32, kThreads), kThreads>>>(
      scores, ld, n, tiles, tiles_per_row, o.temperature, o.iterations, o.local_search_steps,
      tile_bits, unfinished, counters);
}

}  // namespace

bool entropic_gpu_supports(NmPattern p) {
  return p.m >= 2 && p.m <= 32 && (p.m & (p.m - 1)) == 0;
}

EntropicRun run_entropic(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern p,
                         const EntropicOptions& o, uint64_t* tile_bits, uint64_t* words) {
  EntropicRun run;
  const int m = p.m;
  const int64_t tiles_per_row = cols / m;
  const int64_t tiles = (rows / m) * tiles_per_row;
  if (tiles == 0) return run;
  DeviceBuffer<int64_t> list(static_cast<size_t>(tiles));
  DeviceBuffer<EntropicCounters> counters(1);
  counters.zero();
  EventTimer timer;
  timer.start();
  with_group_size(m, [&](auto k) {
    constexpr int kM = decltype(k)::value;
    NMS_CHECK(kM > 0, "the GPU entropic solver needs m in {2, 4, 8, 16, 32}, not ", m);
    if constexpr (kM > 0) {
      launch_entropic_m<kM>(scores, tiles, tiles_per_row, ld, p.n, o, tile_bits, list.get(),
                            counters.get());
    }
  });
  sync_checked("entropic sweeps");
  run.sweep_ms = timer.stop();
  EntropicCounters c{};
  counters.download(&c, 1);
  run.nontrivial = static_cast<int64_t>(c.nontrivial);
  run.unfinished = static_cast<int64_t>(c.unfinished);
  run.swaps = static_cast<int64_t>(c.swaps);

  const auto t0 = std::chrono::steady_clock::now();
  const int64_t count = o.repair ? run.unfinished : 0;
  if (count > 0) {
    DeviceBuffer<float> d_tiles(static_cast<size_t>(count * m * m));
    DeviceBuffer<uint64_t> d_bits(static_cast<size_t>(count * m));
    gather_tiles<<<blocks_for(count * m, kThreads), kThreads>>>(
        scores, ld, m, tiles_per_row, list.get(), count, tile_bits, d_tiles.get(), d_bits.get());
    sync_checked("entropic gather");
    std::vector<float> h_tiles(d_tiles.size());
    std::vector<uint64_t> h_bits(d_bits.size());
    d_tiles.download(h_tiles.data(), h_tiles.size());
    d_bits.download(h_bits.data(), h_bits.size());
    EntropicOptions repair_only = o;  // the device ran the local search
    repair_only.local_search_steps = 0;
    run.augmentations = nms::detail::entropic_finish_tiles(h_tiles.data(), count, p.n, m,
                                                           repair_only, h_bits.data());
    d_bits.upload(h_bits.data(), h_bits.size());
    scatter_tiles<<<blocks_for(count * m, kThreads), kThreads>>>(d_bits.get(), m, tiles_per_row,
                                                                 list.get(), count, tile_bits);
    sync_checked("entropic scatter");
  }
  launch_assemble_words(tile_bits, rows, cols, m, words);
  sync_checked("entropic words");
  run.finish_ms = elapsed_ms(t0);
  return run;
}

}  // namespace detail

TransposableResult mask_transposable_entropic_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                                  const EntropicOptions& options,
                                                  GpuTiming* timing) {
  const auto t0 = std::chrono::steady_clock::now();
  detail::require_device("mask_transposable_entropic_gpu");
  check_transposable_input(scores, pattern);
  NMS_CHECK(detail::entropic_gpu_supports(pattern),
            "the GPU entropic solver supports m in "
            "{2, 4, 8, 16, 32}, not ",
            pattern.to_string(), "; use the CPU solver");
  NMS_CHECK(std::isfinite(options.temperature) && options.temperature > 0.0f,
            "temperature must be finite and positive; got ", options.temperature);
  NMS_CHECK(options.iterations >= 0, "iterations must be >= 0; got ", options.iterations);
  NMS_CHECK(options.local_search_steps >= 0, "local_search_steps must be >= 0; got ",
            options.local_search_steps);
  const int64_t rows = scores.rows();
  const int64_t cols = scores.cols();
  TransposableResult result;
  result.mask = BitMask(rows, cols);
  const size_t words = static_cast<size_t>(rows * result.mask.words_per_row());
  detail::DeviceBuffer<float> d_scores(static_cast<size_t>(rows * cols));
  if (scores.size() > 0) {
    NMS_CUDA_CHECK(cudaMemcpy2D(d_scores.get(), cols * sizeof(float), scores.data(),
                                scores.ld() * sizeof(float), cols * sizeof(float), rows,
                                cudaMemcpyHostToDevice));
  }
  detail::DeviceBuffer<uint64_t> d_tile_bits(static_cast<size_t>(rows * (cols / pattern.m)));
  detail::DeviceBuffer<uint64_t> d_words(words);
  const detail::EntropicRun run = detail::run_entropic(d_scores.get(), rows, cols, cols, pattern,
                                                       options, d_tile_bits.get(), d_words.get());
  if (words > 0) d_words.download(result.mask.row_words(0), words);
  TransposableStats& st = result.stats;
  st.status = SolveStatus::kFeasible;
  st.tiles = (rows / pattern.m) * (cols / pattern.m);
  st.iterations = run.nontrivial * options.iterations + run.swaps + run.augmentations;
  st.objective = mask_score(scores, result.mask);
  st.tiles_exactly_n = count_tiles_exactly_n(result.mask, pattern);
  if (timing != nullptr) *timing = {run.sweep_ms, detail::elapsed_ms(t0)};
  return result;
}

}  // namespace nms::cuda
