// PRIVATE header: per-tile transposable N:M solvers in host-device code (core/host_device.h), one
// m x m tile per call. The CUDA backend (src/cuda) runs one tile per GPU thread with these; the
// host tests (tests/mask/transposable_tile_test.cpp) hold them against the CPU solvers of
// nmsparse/mask/transposable.h on every pattern, so the GPU's arithmetic is tested without a GPU.
//
// Tile layout: score A(r, c) = a[r * ld + c], r, c < m; the result is one word per tile row,
// bit c of keep[r] set = keep (r, c). Scores are finite and >= 0 (checked by the caller).
//
// exact_tile_2_4   the 90-pattern search of the CPU exact solver with its arithmetic and ties:
//   value = (s3 + s2) + (s1 + s0) in double, s_r = A(r, a) + A(r, b) for the row's pair a < b;
//   over (P3, P2) in increasing order the first maximum wins, each with its first best (P1, P0)
//   completion (P0 is determined by P1 and the residual column need). Same masks as the CPU.
// exact_tile_flow  any n:m with m <= kMaxM: successive shortest paths. Start: pi(c_j) = 0, each
//   row keeps its n largest A(r, c) (ties to the lower c), pi(r_i) = its largest dropped score, so
//   every reduced cost is >= 0 (kept: A + pi(c) - pi(r); unkept: pi(r) - A - pi(c)). Then, while
//   a column keeps more than n: Dijkstra (dense, O(m^2)) from the over-full columns to the first
//   under-full column settled, potentials pi(v) += d(v) - d(t) on settled nodes, and the kept
//   entries flip along the path (each row on it drops the column it came from and keeps the
//   next). Reduced costs that round below zero are clamped to 0. The result is an optimum of the
//   "= n" problem (the tests compare its kept score with the CPU solver's certified optimum);
//   where several optima tie, it may pick another of them than the CPU solver, whose start
//   differs. O(m^2) state-free reads per augmentation, at most n m / 2 augmentations, typically
//   a few; O(m) memory (potentials, counts, labels): the tile itself is read where it lies.
// greedy_tile      both orders of mask_transposable_greedy, with its strict total order on (score,
//   tile-local index): a heap sort of m^2 64-bit keys (kMaxM^2 words of workspace), then one
//   pass. Same masks as the CPU.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace nms::detail {

// Bit mask (columns 0..3) of 2:4 row pair p, in increasing order, and its inverse.
NMS_HD inline uint32_t pair24_mask(int p) {
  return (0xCA9653u >> (4 * p)) & 0xFu;  // {0x3, 0x5, 0x6, 0x9, 0xA, 0xC}
}
NMS_HD inline int pair24_index(uint32_t mask) {
  switch (mask) {
    case 0x3:
      return 0;
    case 0x5:
      return 1;
    case 0x6:
      return 2;
    case 0x9:
      return 3;
    case 0xA:
      return 4;
    default:
      return 5;  // 0xC
  }
}

// s[p] = the sum of the row's two entries of pair p, in double (the CPU exact solver's too).
NMS_HD inline void pair_sums_2_4(const float* row, double* s) {
  const double a0 = row[0];
  const double a1 = row[1];
  const double a2 = row[2];
  const double a3 = row[3];
  s[0] = a0 + a1;
  s[1] = a0 + a2;
  s[2] = a1 + a2;
  s[3] = a0 + a3;
  s[4] = a1 + a3;
  s[5] = a2 + a3;
}

// The best 2:4 transposable pattern of one tile: bit 4 r + c = keep (r, c).
NMS_HD inline uint64_t exact_tile_2_4(const float* a, int64_t ld) {
  double s[4][6];
  for (int r = 0; r < 4; ++r) pair_sums_2_4(a + r * ld, s[r]);
  double best = -1.0;
  uint64_t bits = 0;
  for (int p3 = 0; p3 < 6; ++p3) {
    for (int p2 = 0; p2 < 6; ++p2) {
      const uint32_t m3 = pair24_mask(p3);
      const uint32_t m2 = pair24_mask(p2);
      double completion = -1.0;
      uint32_t m1_best = 0;
      uint32_t m0_best = 0;
      for (int p1 = 0; p1 < 6; ++p1) {
        const uint32_t m1 = pair24_mask(p1);
        uint32_t m0 = 0;
        bool ok = true;
        for (int c = 0; c < 4; ++c) {
          const int need = 2 - static_cast<int>((m3 >> c) & 1) - static_cast<int>((m2 >> c) & 1) -
                           static_cast<int>((m1 >> c) & 1);
          ok = ok && need >= 0 && need <= 1;
          m0 |= static_cast<uint32_t>(need > 0) << c;
        }
        if (!ok) continue;
        const double v = s[1][p1] + s[0][pair24_index(m0)];
        if (v > completion) {
          completion = v;
          m1_best = m1;
          m0_best = m0;
        }
      }
      if (completion < 0.0) continue;  // (P3, P2) leaves a column needing more than two
      const double total = (s[3][p3] + s[2][p2]) + completion;
      if (total > best) {
        best = total;
        bits = (uint64_t{m3} << 12) | (uint64_t{m2} << 8) | (uint64_t{m1_best} << 4) | m0_best;
      }
    }
  }
  return bits;
}

// The optimum of the "= n" tile problem by successive shortest paths (see the header comment).
// Returns the number of augmentations, or -1 if no augmenting path was found (impossible for
// finite scores; the caller reports it).
template <int kMaxM>
NMS_HD inline int exact_tile_flow(const float* a, int64_t ld, int n, int m, uint64_t* keep) {
  const uint64_t all = m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;
  if (n == m) {
    for (int r = 0; r < m; ++r) keep[r] = all;
    return 0;
  }
  const double kInf = HUGE_VAL;
  double pr[kMaxM];
  double pc[kMaxM];
  int col_count[kMaxM];
  for (int c = 0; c < m; ++c) {
    pc[c] = 0.0;
    col_count[c] = 0;
  }
  for (int r = 0; r < m; ++r) {
    const float* row = a + r * ld;
    uint64_t bits = 0;
    double dropped = -kInf;
    for (int c = 0; c < m; ++c) {
      const float v = row[c];
      int above = 0;
      for (int k = 0; k < m; ++k) above += row[k] > v || (row[k] == v && k < c);
      if (above < n) {
        bits |= uint64_t{1} << c;
        ++col_count[c];
      } else if (v > dropped) {
        dropped = v;
      }
    }
    keep[r] = bits;
    pr[r] = dropped;
  }
  double dc[kMaxM];
  double dr[kMaxM];
  int from_row[kMaxM];  // column label: the row it was reached from (-1: a source)
  int from_col[kMaxM];  // row label: the column it was reached from
  int augmentations = 0;
  for (;;) {
    uint64_t settled_c = 0;
    uint64_t settled_r = 0;
    bool any_source = false;
    for (int c = 0; c < m; ++c) {
      dc[c] = col_count[c] > n ? 0.0 : kInf;
      any_source = any_source || col_count[c] > n;
      from_row[c] = -1;
      dr[c] = kInf;
      from_col[c] = -1;
    }
    if (!any_source) return augmentations;
    int target = -1;
    for (;;) {
      double best = kInf;
      int node = -1;  // columns 0..m-1, rows m..2m-1; ties to the lower node
      for (int c = 0; c < m; ++c) {
        if (!((settled_c >> c) & 1) && dc[c] < best) {
          best = dc[c];
          node = c;
        }
      }
      for (int r = 0; r < m; ++r) {
        if (!((settled_r >> r) & 1) && dr[r] < best) {
          best = dr[r];
          node = m + r;
        }
      }
      if (node < 0) return -1;
      if (node < m) {
        const int c = node;
        settled_c |= uint64_t{1} << c;
        if (col_count[c] < n) {
          target = c;
          break;
        }
        // Residual arcs c -> r of kept (r, c): reduced cost A + pi(c) - pi(r).
        for (int r = 0; r < m; ++r) {
          if (((settled_r >> r) & 1) || !((keep[r] >> c) & 1)) continue;
          double rc = static_cast<double>(a[r * ld + c]) + pc[c] - pr[r];
          rc = rc > 0.0 ? rc : 0.0;
          if (best + rc < dr[r]) {
            dr[r] = best + rc;
            from_col[r] = c;
          }
        }
      } else {
        const int r = node - m;
        settled_r |= uint64_t{1} << r;
        // Arcs r -> c of unkept (r, c): reduced cost pi(r) - A - pi(c).
        const float* row = a + r * ld;
        for (int c = 0; c < m; ++c) {
          if (((settled_c >> c) & 1) || ((keep[r] >> c) & 1)) continue;
          double rc = pr[r] - static_cast<double>(row[c]) - pc[c];
          rc = rc > 0.0 ? rc : 0.0;
          if (best + rc < dc[c]) {
            dc[c] = best + rc;
            from_row[c] = r;
          }
        }
      }
    }
    const double dt = dc[target];
    for (int c = 0; c < m; ++c) {
      if ((settled_c >> c) & 1) pc[c] += dc[c] - dt;
    }
    for (int r = 0; r < m; ++r) {
      if ((settled_r >> r) & 1) pr[r] += dr[r] - dt;
    }
    ++col_count[target];
    int c = target;
    while (from_row[c] >= 0) {
      const int r = from_row[c];
      const int prev = from_col[r];
      keep[r] |= uint64_t{1} << c;
      keep[r] &= ~(uint64_t{1} << prev);
      c = prev;
    }
    --col_count[c];
    ++augmentations;
  }
}

// Max-heap sift-down of key[root] within key[0, end).
NMS_HD inline void sift_down(uint64_t* key, int root, int end) {
  for (;;) {
    int child = 2 * root + 1;
    if (child >= end) return;
    if (child + 1 < end && key[child + 1] > key[child]) ++child;
    if (key[root] >= key[child]) return;
    const uint64_t t = key[root];
    key[root] = key[child];
    key[child] = t;
    root = child;
  }
}

// Greedy 2-approximation of one tile (mask_transposable_greedy's orders): keep_heavy = descending
// score, ties lower index, keep while row and column hold < n; otherwise ascending score, ties
// higher index, prune while row or column has pruned < m - n.
template <int kMaxM>
NMS_HD inline void greedy_tile(const float* a, int64_t ld, int n, int m, bool keep_heavy,
                               uint64_t* keep) {
  uint64_t key[kMaxM * kMaxM];
  const int mm = m * m;
  for (int r = 0; r < m; ++r) {
    for (int c = 0; c < m; ++c) {
      const float v = a[r * ld + c];
      uint32_t bits = 0;  // order-preserving for v >= 0 (+0.0 and -0.0 both 0)
      if (v != 0.0f) {
        union {
          float f;
          uint32_t u;
        } pun{v};
        bits = pun.u;
      }
      const int idx = r * m + c;
      key[idx] = keep_heavy ? (uint64_t{~bits} << 32) | static_cast<uint32_t>(idx)
                            : (uint64_t{bits} << 32) | static_cast<uint32_t>(mm - 1 - idx);
    }
  }
  // Heap sort, ascending.
  for (int start = mm / 2 - 1; start >= 0; --start) sift_down(key, start, mm);
  for (int end = mm - 1; end > 0; --end) {
    const uint64_t t = key[0];
    key[0] = key[end];
    key[end] = t;
    sift_down(key, 0, end);
  }
  int row_count[kMaxM];
  int col_count[kMaxM];
  for (int i = 0; i < m; ++i) row_count[i] = col_count[i] = 0;
  const uint64_t all = m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;
  for (int r = 0; r < m; ++r) keep[r] = keep_heavy ? 0 : all;
  const int limit = keep_heavy ? n : m - n;
  int done = 0;
  for (int k = 0; k < mm && done < (keep_heavy ? n * m : 2 * m); ++k) {
    const uint32_t low = static_cast<uint32_t>(key[k]);
    const int idx = keep_heavy ? static_cast<int>(low) : mm - 1 - static_cast<int>(low);
    const int r = idx / m;
    const int c = idx % m;
    if (keep_heavy) {
      if (row_count[r] < limit && col_count[c] < limit) {
        keep[r] |= uint64_t{1} << c;
        ++row_count[r];
        ++col_count[c];
        ++done;
      }
    } else if (row_count[r] < limit || col_count[c] < limit) {
      keep[r] &= ~(uint64_t{1} << c);
      done += (row_count[r] + 1 == limit) + (col_count[c] + 1 == limit);
      ++row_count[r];
      ++col_count[c];
    }
  }
}

}  // namespace nms::detail
