// Entropic transposable N:M solver (TSENOR-style): entropy-regularised capacitated optimal
// transport solved by log-domain Dykstra, then greedy rounding, 3-edge local search and an
// augmenting-path repair. See include/nmsparse/mask/transposable.h for the problem.
//
// MATHS (per m x m tile A >= 0, research notes algorithms.md §2.5)
//   A is divided by its tile max (an all-zero tile gets the circulant mask S_ij = [(j - i) mod m
//   < n], which is valid and optimal). With tau = options.temperature the relaxed problem
//     max <S, A> + (1/tau) H(S)  s.t.  S 1 = n 1,  S^T 1 = n 1,  0 <= S <= 1
//   is KL(S || exp(tau A)) minimised over C1 (row sums n) ∩ C2 (column sums n) ∩ C3 (S <= 1).
//   Dykstra's algorithm needs a correction variable only for the non-affine C3. In logs:
//     logS = tau A, logQ = 0; repeat T times:
//       logS_i. -= logsumexp_j(logS_i.) - log n          (project on C1)
//       logS_.j -= logsumexp_i(logS_.j) - log n          (project on C2)
//         (the column sums are taken from the row step's exps, exp(logS) <= n after it, and only
//          a column whose linear sum underflows, < 1e-30, is redone by a log-domain logsumexp)
//       logY = logS + logQ;  logS = min(logY, 0);  logQ = logY - logS   (project on C3)
//   Every quantity stays a difference of logs, so nothing overflows at any tau (plain exp(tau A)
//   overflows float32 once tau > ~88). The sweeps run in float (DykstraReal): on the quality
//   tests (|N(0,1)| and |Laplace| tiles, 2:4 .. 16:32) float and double gave the same masks, and
//   float took 4.6 s CPU against 7.6 s for double on 1024 x 1024 8:16, one thread (bench_entropic,
//   noisy shared 2-core machine). Scores, gains and objectives are double.
//
// ROUNDING
//   1. Greedy: entries by descending fractional logS (ties: lower flat index i*m + j); keep (i, j)
//      while row i and column j both hold < n. Afterwards every (unsaturated row, unsaturated
//      column) pair is already kept.
//   2. Local search, at most L = options.local_search_steps swaps: over all unsaturated rows i and
//      columns j, (i', j') = argmax A[i,j'] + A[i',j] - A[i',j'] subject to S[i',j'] = 1,
//      S[i,j'] = 0, S[i',j] = 0 (first maximum in (i, j, i', j') order); if the gain is > 0 keep
//      (i,j') and (i',j) and drop (i',j'): row i and column j gain one, nothing else changes.
//      Stops early when no swap has positive gain or nothing is unsaturated.
//   3. Repair (options.repair): while some row is short, augment along a max-weight alternating
//      path (row -unkept-> column -kept-> row ... -> short column) found by a layered
//      Bellman-Ford over path lengths 1, 3, ..., 2m - 1 (O(m^3) per augmentation). Candidate ends
//      are tried by decreasing weight and the first simple walk is used; the shortest walk found
//      is always simple, and one exists whenever a row is short (b-matching augmenting-path
//      theorem), so every tile ends with exactly n per row and column.
//   Gains and path weights use the raw (unnormalised) scores in double.
//
// INVARIANTS
//   After every step the tile keeps <= n per row and column (the mask is valid "<= n" even with
//   repair off); with repair every tile keeps exactly n. n == m keeps everything.
//
// COMPLEXITY per tile: O(T m^2) exp/log for Dykstra, O(m^2 log m) greedy, O(L d^2 m^2) local
//   search (d = row deficit, small), O(d m^3) repair. Memory: O(m^2) per thread (one workspace
//   per tile row of the matrix), independent of the matrix size otherwise (plus the mask).
//   Parallel over tile rows with detail::solve_tile_rows; every tile is solved independently and
//   the objective is summed per tile row then in order, so the result is bitwise identical for any
//   thread count.
//
// DEVIATIONS FROM THE PAPER (TSENOR)
//   - Its tau, normalisation of A and T are not published in what we could read; we normalise
//     by the tile max and measured tau/T ourselves (below).
//   - The local search scans all unsaturated (row, column) pairs per step, not one given pair.
//   - The exact-n repair is ours (the paper's behaviour when the local search stalls is unknown).
//   - No convergence test: exactly T sweeps per tile, status is always kFeasible.
//
// DEFAULTS: tau = 100, T = 300, L = 10. Mean / max relative gap of the kept score to the exact
//   "= n" optimum (repair on), 128 x 128 |N(0,1)| (192 x 192 for 16:32), measured with double
//   sweeps and re-measured with the final float code (identical to the digits shown), from
//     build-ent/tests/mask/mask_test --gtest_also_run_disabled_tests
//         --gtest_filter='*DISABLED_SweepTemperature*'
//   T = 300:   tau=10         20             50             100            200            400
//     4:8    0.28/2.4 %   0.12/3.2 %   0.042/1.2 %  0.009/0.92 %  0.11/2.1 %   0.88/4.9 %
//     8:16   0.28/0.74    0.14/0.63    0.11/0.56    0.052/0.43    0.12/0.84    0.59/1.5
//     16:32  0.18/0.29    0.15/0.30    0.080/0.17   0.077/0.22    0.13/0.27    0.28/0.43
//   T = 100 at tau = 100 gives 0.52 / 0.36 / 0.17 % (not converged; best there is tau = 50:
//   0.065 / 0.15 / 0.10 %); T = 50 is best at tau = 20 (0.12 / 0.14 / 0.15 %). tau = 100, T = 300
//   was the best cell for every pattern, matching the research notes (0.05-0.15 %). Without
//   repair 98.4-100 % of tiles already keep exactly n at these settings (L = 10).
//   Speed, 1024 x 1024 |Laplace| (bench_entropic), CPU time on the shared 2-core machine (load ~5,
//   so wall times are not meaningful): one thread, double sweeps with two exp per entry ~7.6 s at
//   8:16; float ~4.6-5.4 s; float with the row exps reused by the column step (MATHS) 2.9 s at
//   8:16 and 3.0 s at 16:32, i.e. ~350 k weights per CPU-second. The cost is T m^2 exp per tile,
//   independent of n. A vectorised exp would be the next step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "mask/entropic_finish.h"
#include "mask/tile_rows.h"
#include "nmsparse/mask/transposable.h"

namespace nms {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Precision of the Dykstra sweeps (see the header comment for the float/double measurement).
using DykstraReal = float;

struct Workspace {
  explicit Workspace(int m)
      : a(m * m),
        logs(m * m),
        logq(m * m),
        lin(m * m),
        col_sum(m),
        order(m * m),
        keep(m * m),
        row_cnt(m),
        col_cnt(m),
        dp_row(m * m),
        dp_col(m * m),
        pred_row(m * m),
        pred_col(m * m),
        seen_row(m),
        seen_col(m) {}
  std::vector<double> a;          // raw scores of the tile
  std::vector<DykstraReal> logs;  // log of the fractional S
  std::vector<DykstraReal> logq;  // log of Dykstra's correction for the box
  std::vector<DykstraReal> lin;   // exp(logS) after the row projection (each entry <= n)
  std::vector<DykstraReal> col_sum;
  std::vector<int> order;
  std::vector<uint8_t> keep;  // 0/1 mask of the tile
  std::vector<int> row_cnt;
  std::vector<int> col_cnt;
  // Repair: best walk weight ending at row/column after t column steps; predecessors.
  std::vector<double> dp_row;
  std::vector<double> dp_col;
  std::vector<int> pred_row;
  std::vector<int> pred_col;
  std::vector<uint8_t> seen_row;
  std::vector<uint8_t> seen_col;
  std::vector<std::pair<double, int>> ends;
};

// Column sums below this (float) are recomputed by a log-domain logsumexp instead (underflow).
constexpr DykstraReal kTinyColumnSum = 1e-30f;

void dykstra(Workspace& w, int n, int m, double tau, int sweeps, double inv_max) {
  const auto log_n = static_cast<DykstraReal>(std::log(static_cast<double>(n)));
  const auto real_n = static_cast<DykstraReal>(n);
  const int mm = m * m;
  for (int k = 0; k < mm; ++k) {
    w.logs[k] = static_cast<DykstraReal>(tau * (w.a[k] * inv_max));
    w.logq[k] = 0.0;
  }
  DykstraReal* s = w.logs.data();
  DykstraReal* e = w.lin.data();
  DykstraReal* cs = w.col_sum.data();
  for (int t = 0; t < sweeps; ++t) {
    // Rows: one exp per entry. e = exp(logS) after the projection = exp(r - mx) * n / sum <= n,
    // reused by the column step, so a sweep costs m^2 exp instead of 2 m^2.
    std::fill(cs, cs + m, DykstraReal{0});
    for (int i = 0; i < m; ++i) {
      DykstraReal* r = s + i * m;
      DykstraReal* er = e + i * m;
      DykstraReal mx = r[0];
      for (int j = 1; j < m; ++j) mx = std::max(mx, r[j]);
      DykstraReal sum = 0;
      for (int j = 0; j < m; ++j) {
        er[j] = std::exp(r[j] - mx);
        sum += er[j];
      }
      const DykstraReal shift = mx + std::log(sum) - log_n;
      const DykstraReal scale = real_n / sum;
      for (int j = 0; j < m; ++j) {
        r[j] -= shift;
        er[j] *= scale;
        cs[j] += er[j];
      }
    }
    // Columns: shift_j = log(column sum) - log n, from the linear sums unless they underflowed.
    for (int j = 0; j < m; ++j) {
      if (cs[j] > kTinyColumnSum) {
        cs[j] = std::log(cs[j]) - log_n;
        continue;
      }
      DykstraReal mx = s[j];
      for (int i = 1; i < m; ++i) mx = std::max(mx, s[i * m + j]);
      DykstraReal sum = 0;
      for (int i = 0; i < m; ++i) sum += std::exp(s[i * m + j] - mx);
      cs[j] = mx + std::log(sum) - log_n;
    }
    // Column projection and box projection with Dykstra's correction, fused.
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        const int k = i * m + j;
        const DykstraReal y = (s[k] - cs[j]) + w.logq[k];
        s[k] = std::min(y, DykstraReal{0});
        w.logq[k] = y - s[k];
      }
    }
  }
}

void greedy_round(Workspace& w, int n, int m) {
  const int mm = m * m;
  for (int k = 0; k < mm; ++k) w.order[k] = k;
  const DykstraReal* s = w.logs.data();
  std::sort(w.order.begin(), w.order.end(),
            [s](int x, int y) { return s[x] > s[y] || (s[x] == s[y] && x < y); });
  for (int k = 0; k < mm; ++k) {
    const int i = w.order[k] / m;
    const int j = w.order[k] % m;
    if (w.row_cnt[i] < n && w.col_cnt[j] < n) {
      w.keep[w.order[k]] = 1;
      ++w.row_cnt[i];
      ++w.col_cnt[j];
    }
  }
}

// Returns the number of swaps applied.
int local_search(Workspace& w, int n, int m, int steps) {
  const double* a = w.a.data();
  const uint8_t* s = w.keep.data();
  int done = 0;
  for (; done < steps; ++done) {
    double best = 0.0;
    int bi = -1, bj = -1, bi2 = -1, bj2 = -1;
    for (int i = 0; i < m; ++i) {
      if (w.row_cnt[i] >= n) continue;
      for (int j = 0; j < m; ++j) {
        if (w.col_cnt[j] >= n) continue;
        for (int i2 = 0; i2 < m; ++i2) {
          if (s[i2 * m + j]) continue;
          for (int j2 = 0; j2 < m; ++j2) {
            if (!s[i2 * m + j2] || s[i * m + j2]) continue;
            const double gain = a[i * m + j2] + a[i2 * m + j] - a[i2 * m + j2];
            if (gain > best) {
              best = gain;
              bi = i, bj = j, bi2 = i2, bj2 = j2;
            }
          }
        }
      }
    }
    if (bi < 0) break;
    w.keep[bi * m + bj2] = 1;
    w.keep[bi2 * m + bj] = 1;
    w.keep[bi2 * m + bj2] = 0;
    ++w.row_cnt[bi];
    ++w.col_cnt[bj];
  }
  return done;
}

// One max-weight augmentation; returns false when no row is short.
bool augment(Workspace& w, int n, int m) {
  const double* a = w.a.data();
  uint8_t* s = w.keep.data();
  bool any = false;
  for (int i = 0; i < m; ++i) {
    w.dp_row[i] = w.row_cnt[i] < n ? 0.0 : kNegInf;
    any |= w.row_cnt[i] < n;
  }
  if (!any) return false;
  // Layer t: dp_row[t*m + i] = best walk reaching row i after t (row -> col -> row) rounds;
  // dp_col[t*m + j] = best walk reaching column j in round t.
  w.ends.clear();
  for (int t = 0; t < m; ++t) {
    const double* dr = &w.dp_row[t * m];
    double* dc = &w.dp_col[t * m];
    int* pc = &w.pred_col[t * m];
    for (int j = 0; j < m; ++j) {
      double best = kNegInf;
      int arg = -1;
      for (int i = 0; i < m; ++i) {
        if (s[i * m + j] || dr[i] == kNegInf) continue;
        const double v = dr[i] + a[i * m + j];
        if (v > best) best = v, arg = i;
      }
      dc[j] = best;
      pc[j] = arg;
      if (arg >= 0 && w.col_cnt[j] < n) w.ends.emplace_back(-best, t * m + j);
    }
    if (t + 1 == m) break;
    double* dr2 = &w.dp_row[(t + 1) * m];
    int* pr = &w.pred_row[(t + 1) * m];
    for (int i = 0; i < m; ++i) {
      double best = kNegInf;
      int arg = -1;
      for (int j = 0; j < m; ++j) {
        if (!s[i * m + j] || dc[j] == kNegInf) continue;
        const double v = dc[j] - a[i * m + j];
        if (v > best) best = v, arg = j;
      }
      dr2[i] = best;
      pr[i] = arg;
    }
  }
  NMS_ASSERT(!w.ends.empty(), "no augmenting path although a row is short");
  std::sort(w.ends.begin(), w.ends.end());  // weight descending, then (t, j) ascending
  for (const auto& end : w.ends) {
    std::fill(w.seen_row.begin(), w.seen_row.end(), 0);
    std::fill(w.seen_col.begin(), w.seen_col.end(), 0);
    bool simple = true;
    int t = end.second / m;
    int j = end.second % m;
    for (;;) {  // walk back: column j in round t <- row i in round t <- column in round t - 1
      if (w.seen_col[j]) simple = false;
      w.seen_col[j] = 1;
      const int i = w.pred_col[t * m + j];
      if (w.seen_row[i]) simple = false;
      w.seen_row[i] = 1;
      if (!simple || t == 0) break;
      j = w.pred_row[t * m + i];
      --t;
    }
    if (!simple) continue;
    t = end.second / m;
    j = end.second % m;
    ++w.col_cnt[j];
    for (;;) {
      const int i = w.pred_col[t * m + j];
      s[i * m + j] = 1;
      if (t == 0) {
        ++w.row_cnt[i];
        break;
      }
      const int j2 = w.pred_row[t * m + i];
      s[i * m + j2] = 0;
      j = j2;
      --t;
    }
    return true;
  }
  NMS_ASSERT(false, "no simple augmenting walk found");
  return false;
}

// Local search then repair from the rounded mask already in w.keep / w.row_cnt / w.col_cnt;
// returns the swaps plus augmentations applied.
int64_t finish_rounding(Workspace& w, int n, int m, const EntropicOptions& opt) {
  int64_t steps = local_search(w, n, m, opt.local_search_steps);
  if (opt.repair) {
    while (augment(w, n, m)) ++steps;
  }
  return steps;
}

struct TileOutcome {
  double objective = 0.0;
  bool exactly_n = false;
  int64_t iterations = 0;
};

TileOutcome solve_tile(ConstMatrixViewF scores, int64_t i0, int64_t j0, int n, int m,
                       const EntropicOptions& opt, Workspace& w, BitMask& mask) {
  double mx = 0.0;
  for (int i = 0; i < m; ++i) {
    const float* row = scores.row(i0 + i) + j0;
    for (int j = 0; j < m; ++j) {
      w.a[i * m + j] = row[j];
      mx = std::max(mx, static_cast<double>(row[j]));
    }
  }
  std::fill(w.keep.begin(), w.keep.end(), 0);
  std::fill(w.row_cnt.begin(), w.row_cnt.end(), 0);
  std::fill(w.col_cnt.begin(), w.col_cnt.end(), 0);
  TileOutcome out;
  if (mx == 0.0 || n == m) {  // circulant; every "= n" mask is optimal (n == m: the only one)
    for (int i = 0; i < m; ++i) {
      for (int k = 0; k < n; ++k) w.keep[i * m + (i + k) % m] = 1;
    }
    std::fill(w.row_cnt.begin(), w.row_cnt.end(), n);
    std::fill(w.col_cnt.begin(), w.col_cnt.end(), n);
  } else {
    dykstra(w, n, m, opt.temperature, opt.iterations, 1.0 / mx);
    greedy_round(w, n, m);
    out.iterations = opt.iterations + finish_rounding(w, n, m, opt);
  }
  bool full = true;
  for (int k = 0; k < m; ++k) full &= w.row_cnt[k] == n && w.col_cnt[k] == n;
  out.exactly_n = full;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < m; ++j) {
      if (!w.keep[i * m + j]) continue;
      mask.set(i0 + i, j0 + j);
      out.objective += w.a[i * m + j];
    }
  }
  return out;
}

}  // namespace

namespace detail {

int64_t entropic_finish_tile(const float* tile, int64_t ld, int n, int m,
                             const EntropicOptions& options, uint64_t* keep_rows) {
  Workspace w(m);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < m; ++j) {
      w.a[i * m + j] = tile[i * ld + j];
      const bool kept = (keep_rows[i] >> j) & 1;
      w.keep[i * m + j] = kept;
      w.row_cnt[i] += kept;
      w.col_cnt[j] += kept;
    }
  }
  const int64_t steps = finish_rounding(w, n, m, options);
  for (int i = 0; i < m; ++i) {
    uint64_t bits = 0;
    for (int j = 0; j < m; ++j) bits |= static_cast<uint64_t>(w.keep[i * m + j]) << j;
    keep_rows[i] = bits;
  }
  return steps;
}

int64_t entropic_finish_tiles(const float* tiles, int64_t count, int n, int m,
                              const EntropicOptions& options, uint64_t* keep_rows) {
  std::vector<int64_t> steps(static_cast<size_t>(count));
  const int64_t tile_size = static_cast<int64_t>(m) * m;
  parallel_for(count, [&](int64_t k) {
    steps[static_cast<size_t>(k)] =
        entropic_finish_tile(tiles + k * tile_size, m, n, m, options, keep_rows + k * m);
  });
  int64_t total = 0;
  for (const int64_t s : steps) total += s;
  return total;
}

}  // namespace detail

TransposableResult mask_transposable_entropic(ConstMatrixViewF scores, NmPattern pattern,
                                              const EntropicOptions& options) {
  check_transposable_input(scores, pattern);
  NMS_CHECK(std::isfinite(options.temperature) && options.temperature > 0.0f,
            "temperature must be finite and positive; got ", options.temperature);
  NMS_CHECK(options.iterations >= 0, "iterations must be >= 0; got ", options.iterations);
  NMS_CHECK(options.local_search_steps >= 0, "local_search_steps must be >= 0; got ",
            options.local_search_steps);
  const int n = pattern.n;
  const int m = pattern.m;
  const int64_t tile_cols = scores.cols() / m;
  return detail::solve_tile_rows(
      scores, pattern, SolveStatus::kFeasible, [&](int64_t r, BitMask& mask) {
        Workspace w(m);
        detail::TileRowStats acc;
        for (int64_t c = 0; c < tile_cols; ++c) {
          const TileOutcome t = solve_tile(scores, r * m, c * m, n, m, options, w, mask);
          acc.objective += t.objective;
          acc.iterations += t.iterations;
          acc.tiles_exactly_n += t.exactly_n;
        }
        return acc;
      });
}

}  // namespace nms
