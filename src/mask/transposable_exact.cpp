// Exact transposable N:M masks.
//
// Problem per m x m tile A (scores >= 0, float, converted exactly to double):
//   maximise sum_ij S_ij A_ij  s.t.  S in {0,1}^{m x m}, every row and column of S sums to n.
// As a min-cost flow: source s -> row r_i (capacity n, cost 0), r_i -> column c_j (capacity 1,
// cost -A_ij), c_j -> sink t (capacity n, cost 0); a flow of value n*m is a feasible S and the
// constraint matrix is totally unimodular, so integral flows suffice.
//
// Algorithm (m:n other than 2:4, n < m): successive shortest paths with node potentials pi.
//   * Warm start (greedy prefix): sort the m^2 entries descending (ties: lower index) and keep
//     them in order until the first one whose row or column is already full; call its score tau.
//     Kept entries are >= tau and all others <= tau, so with pi(s) = pi(r_i) = 0 and
//     pi(c_j) = pi(t) = -tau every residual arc has reduced cost c(u,v) + pi(u) - pi(v) >= 0: the
//     prefix is a min-cost flow of its value (it is the greedy solution up to its first conflict;
//     the full greedy is not a min-cost flow in general, so it cannot be used).
//   * Each of the remaining n*m - prefix augmentations runs Dijkstra from s over the residual graph
//   in reduced costs.
//     The graph is dense (rows x columns), so Dijkstra is the O(m^2) array version: 2m + 1 pops,
//     each a linear scan, each row pop relaxing its unkept columns, each column pop its kept rows.
//     It stops when t is popped; potentials then move by min(d(v), d(t)), which keeps every reduced
//     cost >= 0 (invariant), and the unit of flow is pushed along the shortest path.
//   * Invariant after every augmentation: the flow is a min-cost flow of its value (no negative
//     residual cycle), so after n*m augmentations it is optimal for the "= n" problem.
//   Complexity: O(n m^3) time per tile, O(m^2) memory (one workspace per running row-block task,
//   so O(threads * m^2) beyond the output mask). 16:32 is 512 Dijkstras of about 64 x 64 work.
//
// Floating point. All arithmetic is in double on the exactly converted float scores. Reduced costs
// that round below zero are clamped to 0 (they are >= 0 in exact arithmetic). Optimality is then
// *certified* per tile, independently of how the potentials were reached: with u_i = pi(r_i) and
// v_j = -pi(c_j) as LP duals (free variables for the equality constraints) and w_ij =
// max(0, A_ij - u_i - v_j), the duality gap of the final mask S is
//   gap = sum_{S_ij = 1} max(0, u_i + v_j - A_ij) + sum_{S_ij = 0} max(0, A_ij - u_i - v_j),
// and kept(S) >= OPT - gap. The solver asserts gap <= 1e-9 * m * max_ij A_ij (an internal
// invariant: NMS_ASSERT). On integer-valued scores (below 2^40 or so) every sum is exact and the
// gap is exactly 0; on general floats the kept score is optimal up to double rounding, far below
// float resolution. Comparisons use no tolerance anywhere else.
//
// 2:4: exhaustive search over the 90 valid 4 x 4 patterns. The list is every 16-bit value whose
// bit (4 r + c) means "keep (r, c)" with exactly two bits per row and per column, in increasing
// numeric order (pattern index = position in that order). Score of a pattern =
// ((p0 + p1) + p2) + p3 in double, p_r = A[r][a_r] + A[r][b_r] (a_r < b_r its kept columns);
// the first maximum wins (strict >), so ties go to the lowest pattern index.
//
// n == m keeps everything (no search). Tiles are independent; detail::solve_tile_rows runs over
// row-blocks of tiles (m rows each), each block writes only its own mask rows and its own slot of
// the per-block objective array, which is summed in block order afterwards, so masks and stats are
// bitwise identical for any thread count.
//
// Deviations from the references: Hubara et al. call networkx's network simplex on float costs
// (and fix the flow value to m^2/2, right only for n = m/2); we solve every n, certify the result,
// and warm-start from the conflict-free prefix of the greedy order only.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "mask/tile_rows.h"
#include "nmsparse/mask/transposable.h"

namespace nms {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The 90 valid 2:4 transposable patterns, ascending.
const std::vector<uint16_t>& patterns_2_4() {
  static const std::vector<uint16_t> list = [] {
    std::vector<uint16_t> out;
    for (uint32_t p = 0; p < (1U << 16); ++p) {
      bool ok = true;
      for (int k = 0; k < 4 && ok; ++k) {
        int row = 0;
        int col = 0;
        for (int l = 0; l < 4; ++l) {
          row += (p >> (4 * k + l)) & 1U;
          col += (p >> (4 * l + k)) & 1U;
        }
        ok = row == 2 && col == 2;
      }
      if (ok) out.push_back(static_cast<uint16_t>(p));
    }
    NMS_ASSERT(out.size() == 90, "found ", out.size(), " 2:4 transposable patterns, not 90");
    return out;
  }();
  return list;
}

// Row-pair index of a 4-bit row with two bits set: (a, b) with a < b.
struct Pair {
  int a;
  int b;
};
const std::array<Pair, 16>& row_pairs() {
  static const std::array<Pair, 16> pairs = [] {
    std::array<Pair, 16> out{};
    for (int a = 0; a < 4; ++a) {
      for (int b = a + 1; b < 4; ++b) out[(1 << a) | (1 << b)] = {a, b};
    }
    return out;
  }();
  return pairs;
}

// 2:4 tile: kept bits (bit 4 r + c) of the best pattern.
uint64_t solve_2_4(const double* a) {
  const auto& patterns = patterns_2_4();
  const auto& pairs = row_pairs();
  double pair_sum[4][16];
  for (int r = 0; r < 4; ++r) {
    for (int code = 0; code < 16; ++code) {
      const Pair p = pairs[code];
      pair_sum[r][code] = a[4 * r + p.a] + a[4 * r + p.b];
    }
  }
  double best = -kInf;
  uint16_t best_pattern = 0;
  for (const uint16_t p : patterns) {
    const double s =
        ((pair_sum[0][p & 15] + pair_sum[1][(p >> 4) & 15]) + pair_sum[2][(p >> 8) & 15]) +
        pair_sum[3][(p >> 12) & 15];
    if (s > best) {
      best = s;
      best_pattern = p;
    }
  }
  return best_pattern;
}

// Successive shortest paths from the row-wise optimum, on one tile (m <= 64). The mask is held as
// bitsets, one word per row and one per column, so every scan visits only the arcs that exist:
// a row pop relaxes its m - n unkept columns, a column pop its kept rows. Workspace reused
// across the tiles of a task.
class FlowSolver {
 public:
  explicit FlowSolver(int m)
      : m_(m),
        all_(m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1),
        row_bits_(m),
        col_bits_(m),
        tile_(static_cast<size_t>(m) * m),
        rank_(m),
        cc_(m),
        pr_(m),
        pc_(m),
        dr_(m),
        dc_(m),
        pred_r_(m),
        pred_c_(m) {}

  // Solves the tile whose row r starts at src + r * ld. Returns augmentations; row_bits(r) and
  // score(r, c) then hold the mask and the tile's scores in double.
  int64_t solve(const float* src, int64_t ld, int n) {
    const int m = m_;
    double* a = tile_.data();
    std::fill(col_bits_.begin(), col_bits_.end(), uint64_t{0});
    std::fill(cc_.begin(), cc_.end(), 0);
    std::fill(pc_.begin(), pc_.end(), 0.0);
    double max_a = 0.0;
    for (int i = 0; i < m; ++i) {
      // Row-wise start: rank every entry of the row in float (branch-free, vectorised over `x`),
      // keep rank < n, and set pi(r_i) to the largest dropped score.
      const float* row = src + i * ld;
      int* rank = rank_.data();
      for (int x = 0; x < m; ++x) rank[x] = 0;
      for (int y = 0; y < m; ++y) {
        const float v = row[y];
        for (int x = 0; x < m; ++x) {
          rank[x] += static_cast<int>((v > row[x]) | ((v == row[x]) & (y < x)));
        }
      }
      uint64_t bits = 0;
      float dropped_max = 0.0f;
      double* arow = a + static_cast<size_t>(i) * m;
      for (int x = 0; x < m; ++x) {
        const bool kept = rank[x] < n;
        bits |= static_cast<uint64_t>(kept) << x;
        cc_[x] += static_cast<int>(kept);
        dropped_max = kept ? dropped_max : std::max(dropped_max, row[x]);
        arow[x] = row[x];
        max_a = std::max(max_a, arow[x]);
      }
      row_bits_[i] = bits;
      pr_[i] = dropped_max;
      for (uint64_t b = bits; b != 0; b &= b - 1) col_bits_[std::countr_zero(b)] |= uint64_t{1} << i;
    }
    int64_t excess = 0;
    for (int j = 0; j < m; ++j) excess += std::max(0, cc_[j] - n);
    for (int64_t aug = 0; aug < excess; ++aug) augment(a, n);
    certify(a, n, max_a);
    return excess;
  }

  uint64_t row_bits(int i) const { return row_bits_[i]; }
  double score(int i, int j) const { return tile_[static_cast<size_t>(i) * m_ + j]; }
  bool keep(int i, int j) const { return (row_bits_[i] >> j) & 1U; }

 private:
  // One shortest path, in reduced costs, from any over-full column to the nearest under-full one;
  // moves one kept entry along it (every row keeps n throughout).
  void augment(const double* a, int n) {
    const int m = m_;
    uint64_t open_c = 0;  // reached, not yet popped
    uint64_t open_r = 0;
    uint64_t done_c = 0;
    uint64_t done_r = 0;
    uint64_t under = 0;  // columns keeping fewer than n
    for (int j = 0; j < m; ++j) {
      const int count = cc_[j];
      dc_[j] = kInf;
      if (count > n) {
        dc_[j] = 0.0;
        pred_c_[j] = -1;
        open_c |= uint64_t{1} << j;
      }
      under |= static_cast<uint64_t>(count < n) << j;
    }
    for (int i = 0; i < m; ++i) dr_[i] = kInf;
    int target = -1;
    double reach = 0.0;
    for (;;) {
      // Pop the closest open node; columns first, then rows, lower index first on ties. The
      // selects compile to conditional moves: a branch here mispredicts about half the time.
      double best = kInf;
      int index = -1;
      for (uint64_t b = open_c; b != 0; b &= b - 1) {
        const int j = std::countr_zero(b);
        const bool better = dc_[j] < best;
        best = better ? dc_[j] : best;
        index = better ? j : index;
      }
      int row_index = -1;
      for (uint64_t b = open_r; b != 0; b &= b - 1) {
        const int i = std::countr_zero(b);
        const bool better = dr_[i] < best;
        best = better ? dr_[i] : best;
        row_index = better ? i : row_index;
      }
      const bool is_row = row_index >= 0;
      index = is_row ? row_index : index;
      NMS_ASSERT(index >= 0, "no path from an over-full to an under-full column");
      const uint64_t bit = uint64_t{1} << index;
      if (is_row) {
        const int i = index;
        open_r &= ~bit;
        done_r |= bit;
        const double* row = a + static_cast<size_t>(i) * m;
        // Arcs r_i -> c_j for unkept (i, j): cost -a_ij. Branch-free relaxation.
        const uint64_t reached = ~row_bits_[i] & ~done_c & all_;
        for (uint64_t b = reached; b != 0; b &= b - 1) {
          const int j = std::countr_zero(b);
          const double d = best + std::max(0.0, pr_[i] - row[j] - pc_[j]);
          const bool better = d < dc_[j];
          dc_[j] = better ? d : dc_[j];
          pred_c_[j] = better ? i : pred_c_[j];
        }
        open_c |= reached;
      } else {
        const int j = index;
        if ((under >> j) & 1U) {
          target = j;
          reach = best;
          break;
        }
        open_c &= ~bit;
        done_c |= bit;
        // Arcs c_j -> r_i for kept (i, j): cost +a_ij.
        const uint64_t reached = col_bits_[j] & ~done_r;
        for (uint64_t b = reached; b != 0; b &= b - 1) {
          const int i = std::countr_zero(b);
          const double d = best + std::max(0.0, a[static_cast<size_t>(i) * m + j] + pc_[j] - pr_[i]);
          const bool better = d < dr_[i];
          dr_[i] = better ? d : dr_[i];
          pred_r_[i] = better ? j : pred_r_[i];
        }
        open_r |= reached;
      }
    }
    // Potentials: pi += min(d, reach) keeps every reduced cost >= 0.
    for (int i = 0; i < m; ++i) pr_[i] += std::min(dr_[i], reach);
    for (int j = 0; j < m; ++j) pc_[j] += std::min(dc_[j], reach);
    // Move one kept entry per row along the path, from the target back to its source column.
    int j = target;
    ++cc_[j];
    for (;;) {
      const int i = pred_c_[j];
      flip(i, j);
      j = pred_r_[i];
      flip(i, j);
      if (pred_c_[j] < 0) break;  // a source column (path columns got a predecessor this search)
    }
    --cc_[j];
  }

  void flip(int i, int j) {
    row_bits_[i] ^= uint64_t{1} << j;
    col_bits_[j] ^= uint64_t{1} << i;
  }

  // Dual certificate (see the file comment): asserts the duality gap is within rounding.
  void certify(const double* a, int n, double max_a) const {
    const int m = m_;
    double gap = 0.0;
    for (int i = 0; i < m; ++i) {
      int kept = 0;
      for (uint64_t b = row_bits_[i]; b != 0; b &= b - 1) ++kept;
      NMS_ASSERT(kept == n && cc_[i] == n, "row/column ", i, " keeps ", kept, "/", cc_[i],
                 " after the last augmentation");
      for (int j = 0; j < m; ++j) {
        const double slack = a[static_cast<size_t>(i) * m + j] - pr_[i] + pc_[j];
        gap += keep(i, j) ? std::max(0.0, -slack) : std::max(0.0, slack);
      }
    }
    NMS_ASSERT(gap <= 1e-9 * m * max_a, "transposable exact: duality gap ", gap,
               " exceeds the rounding tolerance (max score ", max_a, ")");
  }

  int m_;
  uint64_t all_;
  std::vector<uint64_t> row_bits_;  // bit j of row i: (i, j) kept
  std::vector<uint64_t> col_bits_;  // bit i of column j: (i, j) kept
  std::vector<double> tile_;        // the scores in double, row-major
  std::vector<int> rank_;
  std::vector<int> cc_;             // kept per column
  std::vector<double> pr_, pc_;  // potentials of the row and column nodes
  std::vector<double> dr_, dc_;  // distances of the current search
  std::vector<int> pred_r_, pred_c_;
};

// mask(i, j0 + c) |= bit c of `bits`, c < m (the m bits may straddle two words).
void or_row_bits(BitMask& mask, int64_t i, int64_t j0, uint64_t bits, int m) {
  uint64_t* words = mask.row_words(i) + (j0 >> 6);
  const int shift = static_cast<int>(j0 & 63);
  words[0] |= bits << shift;
  if (shift + m > 64) words[1] |= bits >> (64 - shift);
}

}  // namespace

TransposableResult mask_transposable_exact(ConstMatrixViewF scores, NmPattern pattern) {
  check_transposable_input(scores, pattern);
  const int n = pattern.n;
  const int m = pattern.m;
  const int64_t tiles_per_row = scores.cols() / m;
  const bool is_2_4 = n == 2 && m == 4;
  if (is_2_4) patterns_2_4();  // build the static list before the parallel region

  return detail::solve_tile_rows(
      scores, pattern, SolveStatus::kOptimal, [&](int64_t b, BitMask& mask) {
        std::vector<double> tile(static_cast<size_t>(m) * m);
        FlowSolver solver(is_2_4 || n == m ? 1 : m);
        double objective = 0.0;
        int64_t iterations = 0;
        const int64_t i0 = b * m;
        for (int64_t t = 0; t < tiles_per_row; ++t) {
          const int64_t j0 = t * m;
          if (!is_2_4 && n != m) {
            iterations += solver.solve(scores.row(i0) + j0, scores.ld(), n);
            for (int r = 0; r < m; ++r) {
              const uint64_t bits = solver.row_bits(r);
              or_row_bits(mask, i0 + r, j0, bits, m);
              for (uint64_t k = bits; k != 0; k &= k - 1) {
                objective += solver.score(r, std::countr_zero(k));
              }
            }
            continue;
          }
          for (int r = 0; r < m; ++r) {
            const float* row = scores.row(i0 + r) + j0;
            for (int c = 0; c < m; ++c) tile[static_cast<size_t>(r) * m + c] = row[c];
          }
          auto emit = [&](int r, int c) {
            mask.set(i0 + r, j0 + c);
            objective += tile[static_cast<size_t>(r) * m + c];
          };
          if (n == m) {
            for (int r = 0; r < m; ++r) {
              for (int c = 0; c < m; ++c) emit(r, c);
            }
          } else {
            const uint64_t bits = solve_2_4(tile.data());
            for (int k = 0; k < 16; ++k) {
              if ((bits >> k) & 1U) emit(k / 4, k % 4);
            }
          }
        }
        return detail::TileRowStats{objective, iterations, tiles_per_row};  // every tile is full
      });
}

}  // namespace nms
