// PRIVATE header of the CUDA backend: the body of every GPU thread, as host-device functions of
// the thread index. The __global__ kernels (mask.cu, mvue.cu) are one-line wrappers around these,
// and tests/cuda/kernel_bodies_test.cpp runs the same bodies on the host over every thread index
// and compares with the CPU library, so the indexing, the word assembly and the per-thread
// arithmetic are tested on machines without a GPU. Only the launch and the copies are not.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/host_device.h"
#include "grad/group.h"
#include "mask/bimask_backward_group.h"
#include "mask/transposable_tile.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/core/rng.h"

namespace nms::cuda::detail {

enum class TileSolver { kExact, kGreedyKeepHeavy, kGreedyPruneLight };

// Counters the tile kernel adds to (device memory, zeroed by the caller).
struct TileCounters {
  unsigned long long augmentations;
  unsigned long long tiles_exactly_n;
  unsigned long long failures;  // tiles whose flow search found no path (a bug; reported)
};

// Largest m per solver on the GPU (workspace per thread: O(m) for exact, m^2 words for greedy).
constexpr int kMaxTileExact = 64;
constexpr int kMaxTileGreedy = 32;

NMS_HD inline void add_counter(unsigned long long* counter, unsigned long long value) {
#if defined(__CUDA_ARCH__)
  atomicAdd(counter, value);
#else
  *counter += value;
#endif
}

NMS_HD inline void flag(unsigned* bad) {
#if defined(__CUDA_ARCH__)
  atomicOr(bad, 1u);
#else
  *bad |= 1u;
#endif
}

// Thread t of the tile kernel: tile (t / tiles_per_row, t % tiles_per_row); writes tile row r to
// tile_bits[(ti * m + r) * tiles_per_row + tj].
template <int kMaxM, bool kGreedy>
NMS_HD inline void transposable_tile_thread(int64_t t, const float* scores, int64_t ld, int n,
                                            int m, int64_t tiles_per_row, TileSolver solver,
                                            uint64_t* tile_bits, TileCounters* counters) {
  const int64_t ti = t / tiles_per_row;
  const int64_t tj = t % tiles_per_row;
  const float* a = scores + ti * m * ld + tj * m;
  uint64_t keep[kMaxM];
  int augmentations = 0;
  if constexpr (!kGreedy) {
    if (kMaxM == 4 && n == 2 && m == 4) {
      const uint64_t bits = nms::detail::exact_tile_2_4(a, ld);
      for (int r = 0; r < 4; ++r) keep[r] = (bits >> (4 * r)) & 0xF;
    } else {
      augmentations = nms::detail::exact_tile_flow<kMaxM>(a, ld, n, m, keep);
    }
  } else {
    nms::detail::greedy_tile<kMaxM>(a, ld, n, m, solver == TileSolver::kGreedyKeepHeavy, keep);
  }
  if (augmentations < 0) {
    add_counter(&counters->failures, 1);
    for (int r = 0; r < m; ++r) keep[r] = 0;
  } else if (augmentations > 0) {
    add_counter(&counters->augmentations, static_cast<unsigned long long>(augmentations));
  }
  bool exactly = true;
  for (int r = 0; r < m; ++r) exactly = exactly && nms::detail::popcount64_hd(keep[r]) == n;
  for (int c = 0; c < m && exactly; ++c) {
    int count = 0;
    for (int r = 0; r < m; ++r) count += static_cast<int>((keep[r] >> c) & 1);
    exactly = count == n;
  }
  if (exactly) add_counter(&counters->tiles_exactly_n, 1);
  for (int r = 0; r < m; ++r) tile_bits[(ti * m + r) * tiles_per_row + tj] = keep[r];
}

// Thread t of the word assembly: word t of the BitMask, the OR of the tile rows overlapping it.
NMS_HD inline void assemble_word_thread(int64_t t, const uint64_t* tile_bits, int64_t cols, int m,
                                        int64_t tiles_per_row, int64_t words_per_row,
                                        uint64_t* words) {
  const int64_t i = t / words_per_row;
  const int64_t j0 = (t % words_per_row) * 64;
  const int64_t j1 = j0 + 64 < cols ? j0 + 64 : cols;
  uint64_t word = 0;
  for (int64_t tj = j0 / m; tj * m < j1; ++tj) {
    const uint64_t bits = tile_bits[i * tiles_per_row + tj];
    const int64_t offset = tj * m - j0;  // in (-m, 64)
    word |= offset >= 0 ? bits << offset : bits >> -offset;
  }
  words[t] = word;
}

// Thread t of the row-wise mask: word t; element j kept iff fewer than n of its group rank above
// it (descending score, ties to the lower index), as mask_nm_rows.
NMS_HD inline void nm_rows_word_thread(int64_t t, const float* scores, int64_t cols, int64_t ld,
                                       int n, int m, int64_t words_per_row, uint64_t* words,
                                       unsigned* bad) {
  const int64_t i = t / words_per_row;
  const int64_t j0 = (t % words_per_row) * 64;
  const int64_t j1 = j0 + 64 < cols ? j0 + 64 : cols;
  const float* row = scores + i * ld;
  uint64_t word = 0;
  for (int64_t j = j0; j < j1; ++j) {
    const float v = row[j];
    if (!(v >= 0.0f)) flag(bad);
    const int64_t g0 = j - j % m;
    int above = 0;
    for (int k = 0; k < m; ++k) {
      const float s = row[g0 + k];
      above += s > v || (s == v && g0 + k < j);
    }
    word |= static_cast<uint64_t>(above < n) << (j - j0);
  }
  words[t] = word;
}

// Thread t of the Bi-Mask backward mask: group t / words_per_row of the permuted rows, word
// t % words_per_row; writes that word of each of the group's m rows (no other thread does).
NMS_HD inline void bimask_backward_thread(int64_t t, const float* w, int64_t cols, int64_t ld,
                                          const uint64_t* fwd, int64_t words_per_row,
                                          const int64_t* perm, int n, int m, uint64_t* words) {
  const int64_t g = t / words_per_row;
  const int64_t word = t % words_per_row;
  const int64_t j0 = word * 64;
  const int64_t j1 = j0 + 64 < cols ? j0 + 64 : cols;
  const int64_t* group_perm = perm + g * m;
  uint64_t out[kMaxGroupSize];
  for (int k = 0; k < m; ++k) out[k] = 0;
  for (int64_t j = j0; j < j1; ++j) {
    const uint64_t kept =
        nms::detail::bimask_backward_group(w, ld, fwd, words_per_row, group_perm, n, m, j);
    for (int k = 0; k < m; ++k) out[k] |= ((kept >> k) & 1) << (j - j0);
  }
  for (int k = 0; k < m; ++k) words[group_perm[k] * words_per_row + word] = out[k];
}

// Calls f(std::integral_constant<int, kM>{}) with kM = m for the group sizes that get their own
// gradient-pruning kernel (m = 2, 4, 8, 16, 32), and kM = 0 (m at run time) for the others.
template <typename F>
void with_group_size(int m, F&& f) {
  switch (m) {
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

// Thread t of gradient pruning: group t (along rows: row t / (cols / m); along columns: rows
// (t / cols) * m .. + m of column t % cols, so a warp reads consecutive columns).
// kM > 0 fixes m at compile time (it must equal m): the group loops then unroll and the group
// stays in registers. With a run-time m, nvcc puts the arrays in local memory (768-byte stack
// frame), and MVUE 2:4 ran at 863 GB/s, 18 % of an H200's 4.8 TB/s.
template <int kM = 0>
NMS_HD inline void grad_prune_thread(int64_t t, const float* g, int64_t rows, int64_t cols,
                                     int64_t ld, GradMethod method, int n, int m_runtime,
                                     bool rows_axis, const CounterRng& rng, float* out,
                                     int64_t ld_out, unsigned* bad) {
  const int m = kM > 0 ? kM : m_runtime;
  int64_t r0;
  int64_t c0;
  int64_t step_in;
  int64_t step_out;
  if (rows_axis) {
    const int64_t per_row = cols / m;
    r0 = t / per_row;
    c0 = (t % per_row) * m;
    step_in = 1;
    step_out = 1;
  } else {
    r0 = (t / cols) * m;
    c0 = t % cols;
    step_in = ld;
    step_out = ld_out;
  }
  float in[kM > 0 ? kM : kMaxGroupSize];
  float res[kM > 0 ? kM : kMaxGroupSize];
  bool finite = true;
  for (int i = 0; i < m; ++i) {
    in[i] = g[r0 * ld + c0 + i * step_in];
    finite = finite && nms::detail::finite_hd(in[i]);
  }
  const uint64_t gid =
      nms::detail::grad_group_id(rows_axis ? NmAxis::kRows : NmAxis::kCols, r0, c0, rows, cols, m);
  const float u0 = nms::detail::grad_uniform(rng, method, gid, 0);
  const float u1 =
      method == GradMethod::kMvueApprox24 ? nms::detail::grad_uniform(rng, method, gid, 1) : 0.0f;
  if (!finite || !nms::detail::prune_group(method, n, m, in, u0, u1, res)) {
    flag(bad);
    for (int i = 0; i < m; ++i) res[i] = 0.0f;
  }
  for (int i = 0; i < m; ++i) out[r0 * ld_out + c0 + i * step_out] = res[i];
}

// Four consecutive groups per thread (group ids 4t .. 4t + 3), for m = 2, 4, 8 where
// grad_prune_quads_fit: one Philox block gives the four uniforms (two blocks for approximate
// MVUE), and a row of a group's rows is one 16-byte access (along columns: 4 adjacent columns;
// along rows: the 4m contiguous values of the four groups). Per group the arithmetic is
// grad_prune_thread's, so the results are the same bits. On an H200, MVUE 2:4 along tokens of a
// 16384^2 gradient ran at 1.64 TB/s with a thread per group (a Philox block per group, 1 of its
// 4 words used) against 4.2 TB/s for a copy.
NMS_HD inline bool grad_prune_quads_fit(int64_t cols, int64_t ld, int64_t ld_out, int m,
                                        bool rows_axis, const float* g, const float* out) {
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return (m == 2 || m == 4 || m == 8) && ld % 4 == 0 && ld_out % 4 == 0 && aligned(g) &&
         aligned(out) && (rows_axis ? (cols / m) % 4 == 0 : cols % 4 == 0);
}

NMS_HD inline void load4(const float* p, float* v) {
#if defined(__CUDA_ARCH__)
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
#else
  for (int k = 0; k < 4; ++k) v[k] = p[k];
#endif
}

NMS_HD inline void store4(float* p, const float* v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
  for (int k = 0; k < 4; ++k) p[k] = v[k];
#endif
}

// Thread t of the four-group kernel: groups 4t .. 4t + 3 (rows * cols / (4 kM) threads).
template <int kM>
NMS_HD inline void grad_prune_quad_thread(int64_t t, const float* g, int64_t cols, int64_t ld,
                                          GradMethod method, int n, bool rows_axis,
                                          const CounterRng& rng, float* out, int64_t ld_out,
                                          unsigned* bad) {
  float in[4][kM];  // in[k]: group 4t + k
  int64_t r0;
  int64_t c0;
  if (rows_axis) {  // groups side by side in row r0: 4 kM contiguous values
    const int64_t per_row = cols / (4 * kM);
    r0 = t / per_row;
    c0 = (t % per_row) * 4 * kM;
    float flat[4 * kM];
    NMS_HD_UNROLL
    for (int v = 0; v < kM; ++v) load4(g + r0 * ld + c0 + 4 * v, flat + 4 * v);
    NMS_HD_UNROLL
    for (int k = 0; k < 4; ++k) {
      NMS_HD_UNROLL
      for (int i = 0; i < kM; ++i) in[k][i] = flat[k * kM + i];
    }
  } else {  // four adjacent columns, rows r0 .. r0 + kM - 1
    const int64_t per_row = cols / 4;
    r0 = (t / per_row) * kM;
    c0 = (t % per_row) * 4;
    NMS_HD_UNROLL
    for (int i = 0; i < kM; ++i) {
      float v[4];
      load4(g + (r0 + i) * ld + c0, v);
      NMS_HD_UNROLL
      for (int k = 0; k < 4; ++k) in[k][i] = v[k];
    }
  }
  // Uniforms of groups 4t + k: word 4t + k (block t), or for approximate MVUE words
  // 2 (4t + k) and 2 (4t + k) + 1 (blocks 2t and 2t + 1), as grad_uniform.
  float u0[4];
  float u1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (method == GradMethod::kMvueApprox24) {
    const PhiloxCounter lo = rng.block(2 * static_cast<uint64_t>(t));
    const PhiloxCounter hi = rng.block(2 * static_cast<uint64_t>(t) + 1);
    u0[0] = CounterRng::uniform_of_word(lo[0]), u1[0] = CounterRng::uniform_of_word(lo[1]);
    u0[1] = CounterRng::uniform_of_word(lo[2]), u1[1] = CounterRng::uniform_of_word(lo[3]);
    u0[2] = CounterRng::uniform_of_word(hi[0]), u1[2] = CounterRng::uniform_of_word(hi[1]);
    u0[3] = CounterRng::uniform_of_word(hi[2]), u1[3] = CounterRng::uniform_of_word(hi[3]);
  } else {
    const PhiloxCounter b = rng.block(static_cast<uint64_t>(t));
    NMS_HD_UNROLL
    for (int k = 0; k < 4; ++k) u0[k] = CounterRng::uniform_of_word(b[k]);
  }
  float res[4][kM];
  NMS_HD_UNROLL
  for (int k = 0; k < 4; ++k) {
    bool finite = true;
    NMS_HD_UNROLL
    for (int i = 0; i < kM; ++i) finite = finite && nms::detail::finite_hd(in[k][i]);
    if (!finite || !nms::detail::prune_group(method, n, kM, in[k], u0[k], u1[k], res[k])) {
      flag(bad);
      NMS_HD_UNROLL
      for (int i = 0; i < kM; ++i) res[k][i] = 0.0f;
    }
  }
  if (rows_axis) {
    float flat[4 * kM];
    NMS_HD_UNROLL
    for (int k = 0; k < 4; ++k) {
      NMS_HD_UNROLL
      for (int i = 0; i < kM; ++i) flat[k * kM + i] = res[k][i];
    }
    NMS_HD_UNROLL
    for (int v = 0; v < kM; ++v) store4(out + r0 * ld_out + c0 + 4 * v, flat + 4 * v);
  } else {
    NMS_HD_UNROLL
    for (int i = 0; i < kM; ++i) {
      const float v[4] = {res[0][i], res[1][i], res[2][i], res[3][i]};
      store4(out + (r0 + i) * ld_out + c0, v);
    }
  }
}

}  // namespace nms::cuda::detail
