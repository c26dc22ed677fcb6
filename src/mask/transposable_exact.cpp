// Exact transposable N:M masks.
//
// Problem per m x m tile A (scores >= 0, float, converted exactly to double):
//   maximise sum_ij S_ij A_ij  s.t.  S in {0,1}^{m x m}, every row and column of S sums to n.
// As a min-cost flow: source s -> row r_i (capacity n, cost 0), r_i -> column c_j (capacity 1,
// cost -A_ij), c_j -> sink t (capacity n, cost 0); a flow of value n*m is a feasible S and the
// constraint matrix is totally unimodular, so integral flows suffice.
//
// Algorithm (n < m, other than 2:4): successive shortest paths from a balanced row-wise start.
// Node potentials pi(r_i), pi(c_j); the reduced cost of an arc is c(u, v) + pi(u) - pi(v), so
// unkept (i, j) (arc r_i -> c_j) costs pi(r_i) - A_ij - pi(c_j) and kept (i, j) (residual arc
// c_j -> r_i) costs A_ij + pi(c_j) - pi(r_i).
//   * Start. For ANY column prices pi(c_j), let row i keep its n largest b_ij = A_ij + pi(c_j)
//     and set pi(r_i) = its largest dropped b_ij: every reduced cost is then >= 0, so this is a
//     min-cost pseudo-flow whose only violations are column counts (rows are exact). The prices
//     only decide how far from feasible the start is. They come from a few rounds of dual
//     balancing: each column's price is minus a value between its n-th and (n+1)-th largest
//     A_ij - pi(r_i), each row's threshold the same split of A_ij + pi(c_j), all lines at once by
//     6 branch-free float bisection steps (a heuristic: nothing depends on their accuracy).
//     Rounds: 1 for m <= 8, 2 for m <= 16, 3 above. Measured on |Laplace| tiles, the column
//     excess to repair drops from 4.4 / 12.5 / 36 (plain row-wise start, 4:8 / 8:16 / 16:32) to
//     2.1 / 2.7 / 4.1 augmentations per tile; the greedy-prefix warm start of an earlier version
//     left 3-10x more. Each row's kept set is {b > t_i} for a float bisection split t_i when
//     exactly n double b_ij pass it, else (ties) the n best by rank, ties to the lower column.
//   * Repair. Each augmentation runs Dijkstra in reduced costs from every over-full column
//     (distance 0) and stops at the first under-full column settled; potentials move by
//     min(d(v), d(target)), which keeps every reduced cost >= 0, and one kept entry per row moves
//     along the path (row i drops the column it came from and keeps the next). Invariant: a
//     min-cost pseudo-flow with exact row counts; it is optimal once no column is over-full.
//     Dijkstra is dense and branch-free (SSE2, two doubles per vector): every node has a key
//     (+inf once settled or while unreached), a pop is a vector minimum over the 2m keys, and a
//     relaxation updates all m neighbours with an arc penalty (0 where the residual arc exists,
//     +inf where it does not); branchy versions ran at about half the speed (data-dependent
//     branches mispredict). The mask is kept as 64-bit row words, so m <= 64.
//   Complexity per tile: O(m^2) per bisection step (at most 6 per balancing round, 24 for the
//   start), O(m^2) per augmentation (at most 2m pops, each an O(m) vector minimum and an O(m)
//   relaxation), times the column excess: at most n*m/2, so O(n m^3) in the worst case, and
//   measured at 2-4 augmentations per tile above. Memory O(m^2) per running task, so
//   O(threads * m^2) beyond the output mask.
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
// float resolution. The float balancing never affects this: it only picks the start.
//
// 2:4: exhaustive search over the 90 valid 4 x 4 patterns, factored: rows 3 and 2 take any of
// the 6 column pairs each (36 combinations), which leaves a residual column need (19 distinct
// ones) that rows 1 and 0 must cover; the best completion of each residual is computed once
// (36 candidate sums), then each combination adds its best completion (36 more), instead of 270
// sums for the direct search. Pattern value = (s3 + s2) + (s1 + s0) in double, s_r the row's
// pair sum; ties go to the lowest 16-bit pattern (bit 4 r + c = keep (r, c)). Two adjacent tiles
// run in the two lanes of an SSE2 vector with the same arithmetic.
//
// n == m keeps everything (no search). Tiles are independent; detail::solve_tile_rows runs over
// row-blocks of tiles (m rows each), each block writes only its own mask rows and its own slot of
// the per-block objective array, which is summed in block order afterwards, so masks and stats are
// bitwise identical for any thread count.
//
// Deviations from the references: Hubara et al. call networkx's network simplex on float costs
// (and fix the flow value to m^2/2, right only for n = m/2); we solve every n with a dense
// specialised solver and certify every tile.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "mask/tile_rows.h"
#include "mask/transposable_tile.h"
#include "nmsparse/mask/transposable.h"

namespace nms {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Full unrolling of the fixed-length 2:4 loops turns every table lookup into a constant (GCC;
// other compilers decide for themselves).
#if defined(__GNUC__) && !defined(__clang__)
#define NMS_UNROLL_FULL _Pragma("GCC unroll 36")
#else
#define NMS_UNROLL_FULL
#endif

constexpr std::array<uint8_t, 6> kPairMask = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC};

struct Tables24 {
  std::array<uint8_t, 36> combo_residual{};              // (P3, P2) combination -> residual id
  std::array<std::array<uint8_t, 2>, 36> completions{};  // (P1, P0), grouped by residual id
  std::array<uint8_t, 20> first{};  // completions of id q: [first[q], first[q + 1])
  int residuals = 0;
  int patterns = 0;
};

// Residual need of columns after rows with pairs pa and pb, as base-3 digits (2 - count).
constexpr int need_code(int pa, int pb) {
  int code = 0;
  for (int c = 3; c >= 0; --c) {
    code = 3 * code + 2 - ((kPairMask[static_cast<size_t>(pa)] >> c) & 1) -
           ((kPairMask[static_cast<size_t>(pb)] >> c) & 1);
  }
  return code;
}

constexpr Tables24 make_tables_2_4() {
  Tables24 t;
  std::array<int, 36> codes{};
  std::array<int, 36> raw_id{};  // per combination
  int count = 0;
  for (int k = 0; k < 36; ++k) {
    const int code = need_code(k / 6, k % 6);
    int q = 0;
    while (q < count && codes[static_cast<size_t>(q)] != code) ++q;
    if (q == count) codes[static_cast<size_t>(count++)] = code;
    raw_id[static_cast<size_t>(k)] = q;
  }
  // (P1, P0) completes residual q exactly when it covers the need: its own need is 80 - code.
  std::array<int, 36> size{};
  for (int q = 0; q < count; ++q) {
    for (int c = 0; c < 36; ++c)
      size[static_cast<size_t>(q)] += need_code(c / 6, c % 6) == 80 - codes[static_cast<size_t>(q)];
  }
  // Residual ids in increasing completion count (6 with 1, 12 with 2, 1 with 6), so the search
  // runs fixed-length loops.
  std::array<int, 36> id{};
  int next = 0;
  for (int s = 1; s <= 36; ++s) {
    for (int q = 0; q < count; ++q) {
      if (size[static_cast<size_t>(q)] == s) id[static_cast<size_t>(q)] = next++;
    }
  }
  int pos = 0;
  for (int n = 0; n < count; ++n) {
    int q = 0;
    while (id[static_cast<size_t>(q)] != n) ++q;
    t.first[static_cast<size_t>(n)] = static_cast<uint8_t>(pos);
    for (int c = 0; c < 36; ++c) {
      if (need_code(c / 6, c % 6) == 80 - codes[static_cast<size_t>(q)]) {
        t.completions[static_cast<size_t>(pos++)] = {static_cast<uint8_t>(c / 6),
                                                     static_cast<uint8_t>(c % 6)};
      }
    }
  }
  t.first[static_cast<size_t>(count)] = static_cast<uint8_t>(pos);
  for (int k = 0; k < 36; ++k) {
    const int q = raw_id[static_cast<size_t>(k)];
    t.combo_residual[static_cast<size_t>(k)] = static_cast<uint8_t>(id[static_cast<size_t>(q)]);
    t.patterns += size[static_cast<size_t>(q)];
  }
  t.residuals = count;
  return t;
}

// 2:4 search tables, built at compile time. A row keeps one of 6 column pairs, numbered in
// increasing order of their 4-bit masks. The 90 patterns are enumerated as (P3, P2) x
// completions: rows 3 and 2 pick any pairs (36 combinations, in increasing (P3, P2) order),
// which leaves each column needing 2 - (its count) more kept entries from rows 1 and 0; the
// residual needs take 19 distinct values, and each lists its valid (P1, P0) completions in
// increasing order (1, 2 or 6 of them; 90 in all over the 36 combinations).
constexpr Tables24 kTables24 = make_tables_2_4();
static_assert(kTables24.residuals == 19 && kTables24.patterns == 90 && kTables24.first[6] == 6 &&
              kTables24.first[18] == 30 && kTables24.first[19] == 36);

// Lane operations of the 2:4 search, for one tile (double) or two side by side (SSE2).
inline double splat(double x, double) {
  return x;
}
inline bool greater(double a, double b) {
  return a > b;
}
inline bool equal(double a, double b) {
  return a == b;
}
inline bool either(bool a, bool b) {
  return a || b;
}
inline bool both(bool a, bool b) {
  return a && b;
}
inline double select(bool m, double a, double b) {
  return m ? a : b;
}
#if defined(__SSE2__)
// Two lanes (a plain struct: __m128d itself carries attributes that template arguments drop).
struct Pd {
  __m128d v;
};
inline Pd operator+(Pd a, Pd b) {
  return {_mm_add_pd(a.v, b.v)};
}
inline Pd splat(double x, Pd) {
  return {_mm_set1_pd(x)};
}
inline Pd greater(Pd a, Pd b) {
  return {_mm_cmpgt_pd(a.v, b.v)};
}
inline Pd equal(Pd a, Pd b) {
  return {_mm_cmpeq_pd(a.v, b.v)};
}
inline Pd either(Pd a, Pd b) {
  return {_mm_or_pd(a.v, b.v)};
}
inline Pd both(Pd a, Pd b) {
  return {_mm_and_pd(a.v, b.v)};
}
inline Pd select(Pd m, Pd a, Pd b) {
  return {_mm_or_pd(_mm_and_pd(m.v, a.v), _mm_andnot_pd(m.v, b.v))};
}
#endif

// The search over one tile per lane, given the pair sums s[r][p] = A[r][a] + A[r][b] of pair p.
// Indices travel as doubles (exact). Returns the best value, its (P3, P2) combination and the
// best completion index of every residual id.
template <class V>
struct Search24 {
  V best;
  V combo;
  V lower_arg[19];
};

template <class V>
Search24<V> search_2_4(const V (&s)[4][6]) {
  constexpr const Tables24& t = kTables24;
  const V like = s[0][0];
  Search24<V> out;
  // Best completion per residual id. Ids 0-5 have one completion, 6-17 two, 18 six; the loops
  // are independent, so they overlap instead of forming one long compare chain.
  const auto pair_value = [&](int k) {
    const auto& c = t.completions[static_cast<size_t>(k)];
    return s[1][c[0]] + s[0][c[1]];
  };
  V lower[19];
  NMS_UNROLL_FULL
  for (int q = 0; q < 6; ++q) {
    lower[q] = pair_value(q);
    out.lower_arg[q] = splat(q, like);
  }
  NMS_UNROLL_FULL
  for (int q = 6; q < 18; ++q) {
    const int k = 6 + 2 * (q - 6);
    const V v0 = pair_value(k);
    const V v1 = pair_value(k + 1);
    const auto take = greater(v1, v0);
    lower[q] = select(take, v1, v0);
    out.lower_arg[q] = select(take, splat(k + 1, like), splat(k, like));
  }
  lower[18] = pair_value(30);
  out.lower_arg[18] = splat(30, like);
  NMS_UNROLL_FULL
  for (int k = 31; k < 36; ++k) {
    const V v = pair_value(k);
    const auto take = greater(v, lower[18]);
    out.lower_arg[18] = select(take, splat(k, like), out.lower_arg[18]);
    lower[18] = select(take, v, lower[18]);
  }
  // Best of the 36 (P3, P2) combinations: four interleaved chains (combination k in chain k % 4),
  // merged so that the lowest k wins ties, which is the first maximum in increasing order.
  V chain_best[4];
  V chain_arg[4];
  for (int c = 0; c < 4; ++c) {
    chain_best[c] = splat(-kInf, like);
    chain_arg[c] = splat(c, like);
  }
  NMS_UNROLL_FULL
  for (int k0 = 0; k0 < 36; k0 += 4) {
    NMS_UNROLL_FULL
    for (int c = 0; c < 4; ++c) {
      const int k = k0 + c;
      const V v = (s[3][k / 6] + s[2][k % 6]) + lower[t.combo_residual[static_cast<size_t>(k)]];
      const auto take = greater(v, chain_best[c]);
      chain_arg[c] = select(take, splat(k, like), chain_arg[c]);
      chain_best[c] = select(take, v, chain_best[c]);
    }
  }
  out.best = chain_best[0];
  out.combo = chain_arg[0];
  for (int c = 1; c < 4; ++c) {
    const auto take =
        either(greater(chain_best[c], out.best),
               both(equal(chain_best[c], out.best), greater(out.combo, chain_arg[c])));
    out.combo = select(take, chain_arg[c], out.combo);
    out.best = select(take, chain_best[c], out.best);
  }
  return out;
}

// Kept bits (bit 4 r + c) of combination `combo` with completion `k`.
uint64_t bits_2_4(int combo, int k) {
  const auto& c = kTables24.completions[static_cast<size_t>(k)];
  const auto mask = [](int pair) {
    return static_cast<uint64_t>(kPairMask[static_cast<size_t>(pair)]);
  };
  return (mask(combo / 6) << 12) | (mask(combo % 6) << 8) | (mask(c[0]) << 4) | mask(c[1]);
}

// 2:4 tile at src (rows ld apart): kept bits (bit 4 r + c) of the best pattern. Value of a
// pattern = (s3 + s2) + (s1 + s0) in double with s_r = A[r][a] + A[r][b] for its pair (a < b);
// the first maximum in the enumeration order wins (strict >), which is increasing pattern value
// (P3, P2, P1, P0) order: ties go to the lowest 16-bit pattern. 24 pair sums, 36 + 36 candidate
// sums per tile (the direct search over the 90 patterns took 270).
uint64_t solve_2_4(const float* src, int64_t ld, double& value) {
  double s[4][6];
  for (int r = 0; r < 4; ++r) detail::pair_sums_2_4(src + r * ld, s[r]);
  const Search24<double> found = search_2_4(s);
  const int combo = static_cast<int>(found.combo);
  value = found.best;
  return bits_2_4(
      combo,
      static_cast<int>(found.lower_arg[kTables24.combo_residual[static_cast<size_t>(combo)]]));
}

#if defined(__SSE2__)
// Two adjacent 2:4 tiles (columns [0, 4) and [4, 8) from src), one per SSE2 lane: the same
// arithmetic as solve_2_4, so the same masks and values.
void solve_2_4_pair(const float* src, int64_t ld, uint64_t (&bits)[2], double (&value)[2]) {
  Pd s[4][6];
  for (int r = 0; r < 4; ++r) {
    const float* row = src + r * ld;
    const __m128d a0 = _mm_set_pd(row[4], row[0]);
    const __m128d a1 = _mm_set_pd(row[5], row[1]);
    const __m128d a2 = _mm_set_pd(row[6], row[2]);
    const __m128d a3 = _mm_set_pd(row[7], row[3]);
    s[r][0] = {_mm_add_pd(a0, a1)};
    s[r][1] = {_mm_add_pd(a0, a2)};
    s[r][2] = {_mm_add_pd(a1, a2)};
    s[r][3] = {_mm_add_pd(a0, a3)};
    s[r][4] = {_mm_add_pd(a1, a3)};
    s[r][5] = {_mm_add_pd(a2, a3)};
  }
  const Search24<Pd> found = search_2_4(s);
  double combo[2];
  _mm_storeu_pd(combo, found.combo.v);
  _mm_storeu_pd(value, found.best.v);
  for (int lane = 0; lane < 2; ++lane) {
    const int k = static_cast<int>(combo[lane]);
    double arg[2];
    _mm_storeu_pd(arg, found.lower_arg[kTables24.combo_residual[static_cast<size_t>(k)]].v);
    bits[lane] = bits_2_4(k, static_cast<int>(arg[lane]));
  }
}
#endif

// Lanes of the dense Dijkstra: two doubles per SSE2 vector (every x86-64 CPU has SSE2); the
// scalar versions compute the same values on other targets.
#if defined(__SSE2__)
// Minimum of k[0, len), len even.
double lanes_min(const double* k, int len) {
  __m128d v = _mm_loadu_pd(k);
  for (int x = 2; x < len; x += 2) v = _mm_min_pd(v, _mm_loadu_pd(k + x));
  return std::min(_mm_cvtsd_f64(v), _mm_cvtsd_f64(_mm_unpackhi_pd(v, v)));
}
// Bit x set where k[x] == value, x < len (even).
uint64_t lanes_equal(const double* k, int len, double value) {
  const __m128d v = _mm_set1_pd(value);
  uint64_t bits = 0;
  for (int x = 0; x < len; x += 2) {
    bits |= static_cast<uint64_t>(_mm_movemask_pd(_mm_cmpeq_pd(_mm_loadu_pd(k + x), v))) << x;
  }
  return bits;
}
// For x < len (even), with reduced_x = u - c[x] - q[x] (a row pop) or c[x] + u - q[x] (a column
// pop) and cand_x = best + max(0, reduced_x) + pen[x]: where cand_x < dist[x], set dist[x] =
// key[x] = cand_x and pred[x] = from.
template <bool kRowPop>
void relax_lanes(double best, double u, const double* c, const double* q, const double* pen,
                 int64_t from, int len, double* dist, double* key, int64_t* pred) {
  const __m128d vb = _mm_set1_pd(best);
  const __m128d vu = _mm_set1_pd(u);
  const __m128d zero = _mm_setzero_pd();
  const __m128i vfrom = _mm_set1_epi64x(from);
  for (int x = 0; x < len; x += 2) {
    const __m128d cx = _mm_loadu_pd(c + x);
    const __m128d qx = _mm_loadu_pd(q + x);
    // Row pop (r_i -> c_j): u - a_ij - pc_j. Column pop (c_j -> r_i): a_ij + u - pr_i.
    const __m128d reduced =
        kRowPop ? _mm_sub_pd(_mm_sub_pd(vu, cx), qx) : _mm_sub_pd(_mm_add_pd(cx, vu), qx);
    const __m128d cand =
        _mm_add_pd(_mm_add_pd(vb, _mm_max_pd(zero, reduced)), _mm_loadu_pd(pen + x));
    const __m128d d = _mm_loadu_pd(dist + x);
    const __m128d better = _mm_cmplt_pd(cand, d);
    _mm_storeu_pd(dist + x, _mm_or_pd(_mm_and_pd(better, cand), _mm_andnot_pd(better, d)));
    const __m128d k = _mm_loadu_pd(key + x);
    _mm_storeu_pd(key + x, _mm_or_pd(_mm_and_pd(better, cand), _mm_andnot_pd(better, k)));
    const __m128i b = _mm_castpd_si128(better);
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pred + x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pred + x),
                     _mm_or_si128(_mm_and_si128(b, vfrom), _mm_andnot_si128(b, p)));
  }
}
// Bisection for many lines at once, in float (a heuristic split, verified by the caller where it
// matters): line l < lanes (a multiple of 4) holds v_x(l) = base[x * stride + l] + shift[x],
// x < m. Each step sets t = (lo + hi) / 2 from [min_x v, max_x v] and counts the values above t,
// branch-free for all lines; a line whose count is exactly n keeps its t from then on. Stops
// after `steps` or when every line has its split; returns bit l set when line l has one (then
// exactly n of its values are > t[l] in float).
uint64_t split_lines(const float* base, int stride, const float* shift, int m, int lanes, int n,
                     int steps, float* t, float* lo, float* hi) {
  const __m128 one = _mm_set1_ps(1.0f);
  const __m128 half = _mm_set1_ps(0.5f);
  const __m128 target = _mm_set1_ps(static_cast<float>(n));
  for (int l = 0; l < lanes; l += 4) {
    __m128 vlo = _mm_set1_ps(std::numeric_limits<float>::infinity());
    __m128 vhi = _mm_set1_ps(-std::numeric_limits<float>::infinity());
    for (int x = 0; x < m; ++x) {
      const __m128 v = _mm_add_ps(_mm_loadu_ps(base + x * stride + l), _mm_set1_ps(shift[x]));
      vlo = _mm_min_ps(vlo, v);
      vhi = _mm_max_ps(vhi, v);
    }
    _mm_storeu_ps(lo + l, vlo);
    _mm_storeu_ps(hi + l, vhi);
    _mm_storeu_ps(t + l, _mm_mul_ps(half, _mm_add_ps(vlo, vhi)));
  }
  uint64_t done = 0;
  const uint64_t all = m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;  // lines = m
  for (int step = 0; step < steps && done != all; ++step) {
    done = 0;
    for (int l = 0; l < lanes; l += 4) {
      const __m128 vt = _mm_loadu_ps(t + l);
      __m128 count = _mm_setzero_ps();
      for (int x = 0; x < m; ++x) {
        const __m128 v = _mm_add_ps(_mm_loadu_ps(base + x * stride + l), _mm_set1_ps(shift[x]));
        count = _mm_add_ps(count, _mm_and_ps(_mm_cmpgt_ps(v, vt), one));
      }
      // count > n: lo = t; count < n: hi = t; count == n: lo = hi = t (t stays).
      const __m128 raise = _mm_cmpge_ps(count, target);
      const __m128 lower = _mm_cmple_ps(count, target);
      const __m128 nlo =
          _mm_or_ps(_mm_and_ps(raise, vt), _mm_andnot_ps(raise, _mm_loadu_ps(lo + l)));
      const __m128 nhi =
          _mm_or_ps(_mm_and_ps(lower, vt), _mm_andnot_ps(lower, _mm_loadu_ps(hi + l)));
      _mm_storeu_ps(lo + l, nlo);
      _mm_storeu_ps(hi + l, nhi);
      _mm_storeu_ps(t + l, _mm_mul_ps(half, _mm_add_ps(nlo, nhi)));
      done |= static_cast<uint64_t>(_mm_movemask_ps(_mm_and_ps(raise, lower))) << l;
    }
  }
  return done & all;
}
#else
uint64_t split_lines(const float* base, int stride, const float* shift, int m, int lanes, int n,
                     int steps, float* t, float* lo, float* hi) {
  for (int l = 0; l < lanes; ++l) {
    lo[l] = std::numeric_limits<float>::infinity();
    hi[l] = -std::numeric_limits<float>::infinity();
    for (int x = 0; x < m; ++x) {
      lo[l] = std::min(lo[l], base[x * stride + l] + shift[x]);
      hi[l] = std::max(hi[l], base[x * stride + l] + shift[x]);
    }
    t[l] = 0.5f * (lo[l] + hi[l]);
  }
  uint64_t done = 0;
  const uint64_t all = m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;  // lines = m
  for (int step = 0; step < steps && done != all; ++step) {
    done = 0;
    for (int l = 0; l < lanes; ++l) {
      int count = 0;
      for (int x = 0; x < m; ++x) count += static_cast<int>(base[x * stride + l] + shift[x] > t[l]);
      if (count >= n) lo[l] = t[l];
      if (count <= n) hi[l] = t[l];
      t[l] = 0.5f * (lo[l] + hi[l]);
      done |= static_cast<uint64_t>(count == n) << l;
    }
  }
  return done & all;
}
double lanes_min(const double* k, int len) {
  double v = k[0];
  for (int x = 1; x < len; ++x) v = std::min(v, k[x]);
  return v;
}
uint64_t lanes_equal(const double* k, int len, double value) {
  uint64_t bits = 0;
  for (int x = 0; x < len; ++x) bits |= static_cast<uint64_t>(k[x] == value) << x;
  return bits;
}
template <bool kRowPop>
void relax_lanes(double best, double u, const double* c, const double* q, const double* pen,
                 int64_t from, int len, double* dist, double* key, int64_t* pred) {
  for (int x = 0; x < len; ++x) {
    const double reduced = kRowPop ? (u - c[x]) - q[x] : (c[x] + u) - q[x];
    const double cand = (best + std::max(0.0, reduced)) + pen[x];
    const bool better = cand < dist[x];
    dist[x] = better ? cand : dist[x];
    key[x] = better ? cand : key[x];
    pred[x] = better ? from : pred[x];
  }
}
#endif

// Successive shortest paths from the row-wise optimum, on one tile (m <= 64). Dijkstra is dense
// and branch-free: every row and column node has a key (+inf once settled or while unreached), a
// pop is a vector minimum over the 2m keys, and a relaxation updates all m neighbours at once with
// an arc penalty (0 where the residual arc exists, +inf where it does not). A settled node is never
// improved again (its distance is <= every later candidate), so no "settled" test is needed.
// Branchy versions of the same loops ran at about half the speed: their branches on data (is this
// arc shorter?) mispredict about half the time. Workspace reused across the tiles of a task.
int balance_rounds(int m) {
  return m <= 8 ? 1 : (m <= 16 ? 2 : 3);
}
constexpr int kBalanceSteps = 6;
constexpr int kSplitSteps = 24;

class FlowSolver {
 public:
  explicit FlowSolver(int m)
      : m_(m),
        mp_((m + 1) & ~1),
        a_(size(m)),
        at_(size(m)),
        pen_r_(size(m)),
        pen_c_(size(m)),
        row_bits_(m),
        rank_(m),
        line_(m),
        m4_((m + 3) & ~3),
        af_(static_cast<size_t>(m) * m4_),
        atf_(static_cast<size_t>(m) * m4_),
        prf_(m4_),
        pcf_(m4_),
        negf_(m4_),
        lo_(m4_),
        hi_(m4_),
        split_(m4_),
        cc_(m),
        pr_(mp_),
        pc_(mp_),
        dist_r_(mp_),
        dist_c_(mp_),
        key_r_(mp_),
        key_c_(mp_),
        pred_r_(mp_),
        pred_c_(mp_) {}

  // Solves the tile whose row r starts at src + r * ld. Returns augmentations; row_bits(r) and
  // score(r, c) then hold the mask and the tile's scores in double.
  int64_t solve(const float* src, int64_t ld, int n) {
    const int m = m_;
    const int mp = mp_;
    std::fill(cc_.begin(), cc_.end(), 0);
    std::fill(pc_.begin(), pc_.end(), 0.0);
    std::fill(pr_.begin(), pr_.end(), 0.0);
    std::fill(pen_r_.begin(), pen_r_.end(), kInf);  // padding lanes stay +inf
    std::fill(pen_c_.begin(), pen_c_.end(), kInf);
    double max_a = 0.0;
    for (int i = 0; i < m; ++i) {
      const float* row = src + i * ld;
      double* arow = a_.data() + static_cast<size_t>(i) * mp;
      for (int x = 0; x < m; ++x) {
        arow[x] = row[x];
        at_[static_cast<size_t>(x) * mp + i] = row[x];
        af_[static_cast<size_t>(i) * m4_ + x] = row[x];
        atf_[static_cast<size_t>(x) * m4_ + i] = row[x];
        max_a = std::max(max_a, arow[x]);
      }
    }
    // Dual balancing (a heuristic; any pi(c) gives a valid start): alternately set each column's
    // price to minus a value between its n-th and (n+1)-th largest a_ij - pi(r_i), and each row's
    // to the same split of a_ij + pi(c_j), by a few bisection steps for all lines at once.
    const int m4 = m4_;
    const int br = balance_rounds(m);
    std::fill(prf_.begin(), prf_.end(), 0.0f);
    std::fill(pcf_.begin(), pcf_.end(), 0.0f);
    for (int round = 0; round < br; ++round) {
      for (int i = 0; i < m; ++i) negf_[i] = -prf_[i];
      split_lines(af_.data(), m4, negf_.data(), m, m4, n, kBalanceSteps, pcf_.data(), lo_.data(),
                  hi_.data());
      for (int j = 0; j < m; ++j) pcf_[j] = -pcf_[j];
      if (round + 1 == br) break;
      split_lines(atf_.data(), m4, pcf_.data(), m, m4, n, kBalanceSteps, prf_.data(), lo_.data(),
                  hi_.data());
    }
    for (int j = 0; j < m; ++j) pc_[j] = pcf_[j];
    // Start: row i keeps its n best b_ij = a_ij + pi(c_j) (ties to the lower j) and pi(r_i) =
    // its largest dropped b_ij, so every reduced cost is >= 0: the start is a min-cost pseudo-flow
    // whose only violations are column counts. The kept set is {b > t_i} for the split t_i found
    // by bisection in float, when exactly n of the double b_ij pass it; otherwise (ties, or float
    // rounding at t_i) the row is ranked.
    const uint64_t split = split_lines(atf_.data(), m4, pcf_.data(), m, m4, n, kSplitSteps,
                                       split_.data(), lo_.data(), hi_.data());
    for (int i = 0; i < m; ++i) {
      const double* arow = a_.data() + static_cast<size_t>(i) * mp;
      double* b = line_.data();
      for (int x = 0; x < m; ++x) b[x] = arow[x] + pc_[x];
      uint64_t bits = 0;
      if ((split >> i) & 1U) {
        const double t = split_[i];
        for (int x = 0; x < m; ++x) bits |= static_cast<uint64_t>(b[x] > t) << x;
      }
      if (std::popcount(bits) != n) bits = rank_top(n);
      double dropped_max = -kInf;
      for (int x = 0; x < m; ++x) {
        const bool kept = (bits >> x) & 1U;
        cc_[x] += static_cast<int>(kept);
        dropped_max = kept ? dropped_max : std::max(dropped_max, b[x]);
        pen_r_[static_cast<size_t>(i) * mp + x] = kept ? kInf : 0.0;
        pen_c_[static_cast<size_t>(x) * mp + i] = kept ? 0.0 : kInf;
      }
      row_bits_[i] = bits;
      pr_[i] = dropped_max;
    }
    int64_t excess = 0;
    for (int j = 0; j < m; ++j) excess += std::max(0, cc_[j] - n);
    for (int64_t aug = 0; aug < excess; ++aug) augment(n);
    certify(n, max_a);
    return excess;
  }

  uint64_t row_bits(int i) const { return row_bits_[i]; }
  double score(int i, int j) const { return a_[static_cast<size_t>(i) * mp_ + j]; }

 private:
  // Bits of the n largest of line_[0, m), ties to the lower index (rank counting, O(m^2)).
  uint64_t rank_top(int n) {
    const double* v = line_.data();
    int* rank = rank_.data();
    for (int x = 0; x < m_; ++x) rank[x] = 0;
    for (int y = 0; y < m_; ++y) {
      for (int x = 0; x < m_; ++x) {
        rank[x] += static_cast<int>((v[y] > v[x]) | ((v[y] == v[x]) & (y < x)));
      }
    }
    uint64_t bits = 0;
    for (int x = 0; x < m_; ++x) bits |= static_cast<uint64_t>(rank[x] < n) << x;
    return bits;
  }

  static size_t size(int m) { return static_cast<size_t>(m) * static_cast<size_t>((m + 1) & ~1); }

  // One shortest path, in reduced costs, from any over-full column to the nearest under-full one;
  // moves one kept entry along it (every row keeps n throughout).
  void augment(int n) {
    const int m = m_;
    const int mp = mp_;
    std::fill(dist_r_.begin(), dist_r_.end(), kInf);
    std::fill(dist_c_.begin(), dist_c_.end(), kInf);
    uint64_t under = 0;  // columns keeping fewer than n
    for (int j = 0; j < m; ++j) {
      if (cc_[j] > n) {
        dist_c_[j] = 0.0;
        pred_c_[j] = -1;
      }
      under |= static_cast<uint64_t>(cc_[j] < n) << j;
    }
    key_r_ = dist_r_;
    key_c_ = dist_c_;
    int target = -1;
    double reach = 0.0;
    for (;;) {
      // Pop the closest unsettled node; columns first, then rows, lower index first on ties.
      const double best = std::min(lanes_min(key_c_.data(), mp), lanes_min(key_r_.data(), mp));
      NMS_ASSERT(best < kInf, "no path from an over-full to an under-full column");
      const uint64_t cols = lanes_equal(key_c_.data(), mp, best);
      if (cols != 0) {
        const int j = std::countr_zero(cols);
        if ((under >> j) & 1U) {
          target = j;
          reach = best;
          break;
        }
        key_c_[j] = kInf;
        // Arcs c_j -> r_i for kept (i, j): cost +a_ij, reduced a_ij + pi(c_j) - pi(r_i).
        const size_t off = static_cast<size_t>(j) * mp;
        relax_lanes<false>(best, pc_[j], at_.data() + off, pr_.data(), pen_c_.data() + off, j, mp,
                           dist_r_.data(), key_r_.data(), pred_r_.data());
      } else {
        const int i = std::countr_zero(lanes_equal(key_r_.data(), mp, best));
        key_r_[i] = kInf;
        // Arcs r_i -> c_j for unkept (i, j): cost -a_ij, reduced pi(r_i) - a_ij - pi(c_j).
        const size_t off = static_cast<size_t>(i) * mp;
        relax_lanes<true>(best, pr_[i], a_.data() + off, pc_.data(), pen_r_.data() + off, i, mp,
                          dist_c_.data(), key_c_.data(), pred_c_.data());
      }
    }
    // Potentials: pi += min(d, reach) keeps every reduced cost >= 0.
    for (int i = 0; i < m; ++i) pr_[i] += std::min(dist_r_[i], reach);
    for (int j = 0; j < m; ++j) pc_[j] += std::min(dist_c_[j], reach);
    // Move one kept entry per row along the path, from the target back to its source column.
    int j = target;
    ++cc_[j];
    for (;;) {
      const int i = static_cast<int>(pred_c_[j]);
      flip(i, j);
      j = static_cast<int>(pred_r_[i]);
      flip(i, j);
      if (pred_c_[j] < 0) break;  // a source column (path columns got a predecessor this search)
    }
    --cc_[j];
  }

  void flip(int i, int j) {
    row_bits_[i] ^= uint64_t{1} << j;
    const bool kept = (row_bits_[i] >> j) & 1U;
    pen_r_[static_cast<size_t>(i) * mp_ + j] = kept ? kInf : 0.0;
    pen_c_[static_cast<size_t>(j) * mp_ + i] = kept ? 0.0 : kInf;
  }

  // Dual certificate (see the file comment): asserts the duality gap is within rounding.
  void certify(int n, double max_a) const {
    const int m = m_;
    double gap = 0.0;
    for (int i = 0; i < m; ++i) {
      NMS_ASSERT(std::popcount(row_bits_[i]) == n && cc_[i] == n, "row/column ", i, " keeps ",
                 std::popcount(row_bits_[i]), "/", cc_[i], " after the last augmentation");
      for (int j = 0; j < m; ++j) {
        const double slack = score(i, j) - pr_[i] + pc_[j];
        gap += (row_bits_[i] >> j) & 1U ? std::max(0.0, -slack) : std::max(0.0, slack);
      }
    }
    NMS_ASSERT(gap <= 1e-9 * m * max_a, "transposable exact: duality gap ", gap,
               " exceeds the rounding tolerance (max score ", max_a, ")");
  }

  int m_;
  int mp_;                          // m rounded up to the vector width (2 doubles)
  std::vector<double> a_;           // scores, row-major, rows padded to mp_
  std::vector<double> at_;          // scores, column-major, padded
  std::vector<double> pen_r_;       // row-major: 0 where r_i -> c_j exists (unkept), else +inf
  std::vector<double> pen_c_;       // column-major: 0 where c_j -> r_i exists (kept), else +inf
  std::vector<uint64_t> row_bits_;  // bit j of row i: (i, j) kept
  std::vector<int> rank_;
  std::vector<double> line_;             // one row being ranked
  int m4_;                               // m rounded up to 4 float lanes
  std::vector<float> af_, atf_;          // scores, row- and column-major, padded
  std::vector<float> prf_, pcf_, negf_;  // balancing prices, float
  std::vector<float> lo_, hi_, split_;   // bisection state, one lane per line
  std::vector<int> cc_;                  // kept per column
  std::vector<double> pr_, pc_;          // potentials of the row and column nodes
  std::vector<double> dist_r_, dist_c_, key_r_, key_c_;
  std::vector<int64_t> pred_r_, pred_c_;
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

  return detail::solve_tile_rows(
      scores, pattern, SolveStatus::kOptimal, [&](int64_t b, BitMask& mask) {
        FlowSolver solver(is_2_4 || n == m ? 1 : m);
        const uint64_t all = m == 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;
        double objective = 0.0;
        int64_t iterations = 0;
        const int64_t i0 = b * m;
        for (int64_t t = 0; t < tiles_per_row; ++t) {
          const int64_t j0 = t * m;
          if (n == m) {
            for (int r = 0; r < m; ++r) {
              or_row_bits(mask, i0 + r, j0, all, m);
              const float* row = scores.row(i0 + r) + j0;
              for (int c = 0; c < m; ++c) objective += row[c];
            }
          } else if (is_2_4) {
            uint64_t bits[2] = {0, 0};
            double value[2] = {0.0, 0.0};
            int count = 1;
#if defined(__SSE2__)
            if (t + 1 < tiles_per_row) {
              solve_2_4_pair(scores.row(i0) + j0, scores.ld(), bits, value);
              count = 2;
            }
#endif
            if (count == 1) bits[0] = solve_2_4(scores.row(i0) + j0, scores.ld(), value[0]);
            for (int r = 0; r < 4; ++r) {
              or_row_bits(mask, i0 + r, j0,
                          ((bits[0] >> (4 * r)) & 15U) | (((bits[1] >> (4 * r)) & 15U) << 4),
                          4 * count);
            }
            objective += value[0];
            if (count == 2) objective += value[1];
            t += count - 1;
          } else {
            iterations += solver.solve(scores.row(i0) + j0, scores.ld(), n);
            for (int r = 0; r < m; ++r) {
              const uint64_t bits = solver.row_bits(r);
              or_row_bits(mask, i0 + r, j0, bits, m);
              for (uint64_t k = bits; k != 0; k &= k - 1) {
                objective += solver.score(r, std::countr_zero(k));
              }
            }
          }
        }
        return detail::TileRowStats{objective, iterations, tiles_per_row};  // every tile is full
      });
}

}  // namespace nms
