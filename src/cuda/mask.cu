// Mask solvers on the GPU: transposable (exact, greedy), row-wise N:M and the Bi-Mask backward
// mask. One GPU thread per m x m tile / per output word runs the host-device routines of
// src/mask (see nmsparse/cuda/cuda.h for what equals the CPU result).
//
// Layout. The tile kernel writes tile row r of tile (ti, tj) as one word of tile_bits at
// ((ti * m + r) * tiles_per_row + tj); a second kernel ORs the tiles overlapping each 64-bit word
// of the BitMask (tiles of an m that does not divide 64 straddle words, so tiles cannot write
// words directly without atomics). Threads of a warp take consecutive tiles of one tile row.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda/cuda_support.h"
#include "cuda/launch.h"
#include "mask/bimask_checks.h"
#include "nmsparse/cuda/cuda.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"

namespace nms::cuda {
namespace detail {
namespace {

constexpr int kThreads = 128;

// kGreedy: a separate instantiation, so the exact kernel's stack frame holds only its O(m) state
// and not greedy's m^2 sort keys (ptxas -v, sm_90: 9.6 KB at kMaxM = 32 for both together).
template <int kMaxM, bool kGreedy>
__global__ void transposable_tiles(const float* scores, int64_t ld, int n, int m, int64_t tiles,
                                   int64_t tiles_per_row, TileSolver solver, uint64_t* tile_bits,
                                   TileCounters* counters) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < tiles) {
    transposable_tile_thread<kMaxM, kGreedy>(t, scores, ld, n, m, tiles_per_row, solver, tile_bits,
                                             counters);
  }
}

__global__ void assemble_words(const uint64_t* tile_bits, int64_t words, int64_t cols, int m,
                               int64_t tiles_per_row, int64_t words_per_row, uint64_t* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < words) assemble_word_thread(t, tile_bits, cols, m, tiles_per_row, words_per_row, out);
}

__global__ void nm_rows_words(const float* scores, int64_t words, int64_t cols, int64_t ld, int n,
                              int m, int64_t words_per_row, uint64_t* out, unsigned* bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < words) nm_rows_word_thread(t, scores, cols, ld, n, m, words_per_row, out, bad);
}

__global__ void bimask_backward_words(const float* w, int64_t work, int64_t cols, int64_t ld,
                                      const uint64_t* fwd, int64_t words_per_row,
                                      const int64_t* perm, int n, int m, uint64_t* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < work) bimask_backward_thread(t, w, cols, ld, fwd, words_per_row, perm, n, m, out);
}

template <int kMaxM>
void launch_tiles(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern p,
                  TileSolver solver, uint64_t* tile_bits, TileCounters* counters) {
  const int64_t tile_rows = rows / p.m;
  const int64_t tiles_per_row = cols / p.m;
  const unsigned blocks = blocks_for(tile_rows * tiles_per_row, kThreads);
  if (solver == TileSolver::kExact) {
    transposable_tiles<kMaxM, false><<<blocks, kThreads>>>(scores, ld, p.n, p.m,
                                                           tile_rows * tiles_per_row, tiles_per_row,
                                                           solver, tile_bits, counters);
  } else if constexpr (kMaxM <= kMaxTileGreedy) {
    transposable_tiles<kMaxM, true><<<blocks, kThreads>>>(scores, ld, p.n, p.m,
                                                          tile_rows * tiles_per_row, tiles_per_row,
                                                          solver, tile_bits, counters);
  }
}

}  // namespace

void launch_transposable(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern p,
                         TileSolver solver, uint64_t* tile_bits, uint64_t* words,
                         TileCounters* counters) {
  if (rows == 0 || cols == 0) return;
  if (p.m <= 4) {
    launch_tiles<4>(scores, rows, cols, ld, p, solver, tile_bits, counters);
  } else if (p.m <= 8) {
    launch_tiles<8>(scores, rows, cols, ld, p, solver, tile_bits, counters);
  } else if (p.m <= 16) {
    launch_tiles<16>(scores, rows, cols, ld, p, solver, tile_bits, counters);
  } else if (p.m <= 32) {
    launch_tiles<32>(scores, rows, cols, ld, p, solver, tile_bits, counters);
  } else {
    launch_tiles<64>(scores, rows, cols, ld, p, solver, tile_bits, counters);
  }
  launch_assemble_words(tile_bits, rows, cols, p.m, words);
}

void launch_assemble_words(const uint64_t* tile_bits, int64_t rows, int64_t cols, int m,
                           uint64_t* words) {
  const int64_t words_per_row = (cols + 63) / 64;
  if (rows * words_per_row == 0) return;
  assemble_words<<<blocks_for(rows * words_per_row, kThreads), kThreads>>>(
      tile_bits, rows * words_per_row, cols, m, cols / m, words_per_row, words);
}

void launch_nm_rows(const float* scores, int64_t rows, int64_t cols, int64_t ld, NmPattern p,
                    uint64_t* words, unsigned* bad) {
  const int64_t words_per_row = (cols + 63) / 64;
  if (rows * words_per_row == 0) return;
  nm_rows_words<<<blocks_for(rows * words_per_row, kThreads), kThreads>>>(
      scores, rows * words_per_row, cols, ld, p.n, p.m, words_per_row, words, bad);
}

void launch_bimask_backward(const float* w, int64_t rows, int64_t cols, int64_t ld,
                            const uint64_t* fwd, const int64_t* perm, NmPattern p,
                            uint64_t* words) {
  const int64_t words_per_row = (cols + 63) / 64;
  const int64_t work = (rows / p.m) * words_per_row;
  if (work == 0) return;
  bimask_backward_words<<<blocks_for(work, kThreads), kThreads>>>(
      w, work, cols, ld, fwd, words_per_row, perm, p.n, p.m, words);
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// Uploads a (possibly strided) host matrix densely (ld = cols).
detail::DeviceBuffer<float> upload_matrix(ConstMatrixViewF a) {
  detail::DeviceBuffer<float> d(static_cast<size_t>(a.rows() * a.cols()));
  if (a.size() == 0) return d;
  NMS_CUDA_CHECK(cudaMemcpy2D(d.get(), a.cols() * sizeof(float), a.data(), a.ld() * sizeof(float),
                              a.cols() * sizeof(float), a.rows(), cudaMemcpyHostToDevice));
  return d;
}

void download_words(const detail::DeviceBuffer<uint64_t>& d, BitMask& mask) {
  if (mask.rows() * mask.words_per_row() == 0) return;
  d.download(mask.row_words(0), static_cast<size_t>(mask.rows() * mask.words_per_row()));
}

TransposableResult transposable(ConstMatrixViewF scores, NmPattern pattern,
                                detail::TileSolver solver, GpuTiming* timing) {
  const auto t0 = Clock::now();
  detail::require_device("mask_transposable_gpu");
  check_transposable_input(scores, pattern);
  const bool exact = solver == detail::TileSolver::kExact;
  const int limit = exact ? detail::kMaxTileExact : detail::kMaxTileGreedy;
  NMS_CHECK(pattern.m <= limit, "the GPU ", exact ? "exact" : "greedy",
            " solver supports m <= ", limit, ", not ", pattern.to_string(), "; use the CPU solver");
  const int64_t rows = scores.rows();
  const int64_t cols = scores.cols();
  TransposableResult result;
  result.mask = BitMask(rows, cols);
  const detail::DeviceBuffer<float> d_scores = upload_matrix(scores);
  detail::DeviceBuffer<uint64_t> d_tile_bits(static_cast<size_t>(rows * (cols / pattern.m)));
  detail::DeviceBuffer<uint64_t> d_words(static_cast<size_t>(rows * result.mask.words_per_row()));
  detail::DeviceBuffer<detail::TileCounters> d_counters(1);
  d_counters.zero();
  detail::EventTimer timer;
  timer.start();
  detail::launch_transposable(d_scores.get(), rows, cols, cols, pattern, solver, d_tile_bits.get(),
                              d_words.get(), d_counters.get());
  detail::sync_checked("mask_transposable_gpu");
  const double kernel_ms = timer.stop();
  detail::TileCounters counters{};
  d_counters.download(&counters, 1);
  NMS_ASSERT(counters.failures == 0, counters.failures, " tiles found no augmenting path");
  download_words(d_words, result.mask);
  TransposableStats& st = result.stats;
  st.status = exact ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  st.tiles = (rows / pattern.m) * (cols / pattern.m);
  st.tiles_exactly_n = static_cast<int64_t>(counters.tiles_exactly_n);
  st.iterations = static_cast<int64_t>(counters.augmentations);
  st.objective = mask_score(scores, result.mask);
  if (timing != nullptr) *timing = {kernel_ms, detail::elapsed_ms(t0)};
  return result;
}

}  // namespace

TransposableResult mask_transposable_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                         TransposableSolver solver, GpuTiming* timing) {
  switch (solver) {
    case TransposableSolver::kExact:
      return transposable(scores, pattern, detail::TileSolver::kExact, timing);
    case TransposableSolver::kGreedy:
      return transposable(scores, pattern, detail::TileSolver::kGreedyKeepHeavy, timing);
    case TransposableSolver::kEntropic:
      return mask_transposable_entropic_gpu(scores, pattern, EntropicOptions{}, timing);
  }
  NMS_THROW("unknown TransposableSolver ", static_cast<int>(solver));
}

TransposableResult mask_transposable_greedy_gpu(ConstMatrixViewF scores, NmPattern pattern,
                                                GreedyOrder order, GpuTiming* timing) {
  NMS_CHECK(order == GreedyOrder::kKeepHeavyFirst || order == GreedyOrder::kPruneLightFirst,
            "unknown GreedyOrder ", static_cast<int>(order));
  return transposable(scores, pattern,
                      order == GreedyOrder::kKeepHeavyFirst ? detail::TileSolver::kGreedyKeepHeavy
                                                            : detail::TileSolver::kGreedyPruneLight,
                      timing);
}

BitMask mask_nm_rows_gpu(ConstMatrixViewF scores, NmPattern pattern, GpuTiming* timing) {
  const auto t0 = Clock::now();
  detail::require_device("mask_nm_rows_gpu");
  pattern.validate();
  NMS_CHECK(scores.cols() % pattern.m == 0, "cols (", scores.cols(), ") is not a multiple of m (",
            pattern.m, ")");
  BitMask mask(scores.rows(), scores.cols());
  const detail::DeviceBuffer<float> d_scores = upload_matrix(scores);
  detail::DeviceBuffer<uint64_t> d_words(static_cast<size_t>(mask.rows() * mask.words_per_row()));
  detail::DeviceBuffer<unsigned> d_bad(1);
  d_bad.zero();
  detail::EventTimer timer;
  timer.start();
  detail::launch_nm_rows(d_scores.get(), scores.rows(), scores.cols(), scores.cols(), pattern,
                         d_words.get(), d_bad.get());
  detail::sync_checked("mask_nm_rows_gpu");
  const double kernel_ms = timer.stop();
  unsigned bad = 0;
  d_bad.download(&bad, 1);
  if (bad != 0) (void)mask_nm_rows(scores, pattern);  // throws the CPU's message for the score
  NMS_ASSERT(bad == 0, "the GPU flagged a score the CPU accepts");
  download_words(d_words, mask);
  if (timing != nullptr) *timing = {kernel_ms, detail::elapsed_ms(t0)};
  return mask;
}

BitMask bimask_backward_gpu(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                            const std::vector<int64_t>& perm, GpuTiming* timing) {
  const auto t0 = Clock::now();
  detail::require_device("bimask_backward_gpu");
  const int64_t rows = weights.rows();
  const int64_t cols = weights.cols();
  nms::detail::bimask_check_shape(rows, cols, pattern, "bimask_backward_gpu");
  NMS_CHECK(forward.rows() == rows && forward.cols() == cols, "forward mask is ", forward.rows(),
            " x ", forward.cols(), ", weights ", rows, " x ", cols);
  nms::detail::bimask_check_perm(perm, rows);
  BitMask mask(rows, cols);
  const size_t words = static_cast<size_t>(rows * mask.words_per_row());
  const detail::DeviceBuffer<float> d_w = upload_matrix(weights);
  detail::DeviceBuffer<uint64_t> d_fwd(words);
  if (words > 0) d_fwd.upload(forward.row_words(0), words);
  detail::DeviceBuffer<int64_t> d_perm(perm.size());
  if (!perm.empty()) d_perm.upload(perm.data(), perm.size());
  detail::DeviceBuffer<uint64_t> d_words(words);  // every word is written by one thread
  detail::EventTimer timer;
  timer.start();
  detail::launch_bimask_backward(d_w.get(), rows, cols, cols, d_fwd.get(), d_perm.get(), pattern,
                                 d_words.get());
  detail::sync_checked("bimask_backward_gpu");
  const double kernel_ms = timer.stop();
  download_words(d_words, mask);
  if (timing != nullptr) *timing = {kernel_ms, detail::elapsed_ms(t0)};
  return mask;
}

}  // namespace nms::cuda
