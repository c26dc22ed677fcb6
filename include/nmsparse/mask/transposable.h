// Transposable N:M masks: at most n kept in every row AND every column of each m x m tile of a
// score matrix, so that both W and W^T are N:M (the backward-data GEMM dX = dY W can run sparse).
//
// Problem per tile A (m x m, scores >= 0):
//   maximise sum_ij S_ij A_ij  subject to  S in {0,1}^{m x m},  S 1 = n 1,  S^T 1 = n 1.
// The constraint matrix is totally unimodular (bipartite b-matching), so the LP relaxation has an
// integral optimum. Exact solvers optimise this "= n" problem; validity is "<= n" (heuristics
// may keep fewer). Tiles are m consecutive rows x m consecutive columns; rows and cols must both
// be multiples of m.
//
// Solvers (one source file each, with the maths, invariants and complexity in its header
// comment): exact (min-cost flow specialised to dense tiles; 2:4 by exhaustive search over the
// 90 valid patterns), greedy (the 2-approximation, two orders) and entropic (TSENOR-style
// entropy-regularised optimal transport, log-domain Dykstra, rounding, local search, repair).
// Every solver is parallel over tiles, deterministic for any thread count, and its result can be
// checked independently with check_transposable_result.
//
// Scores must be finite and non-negative (|W|, Wanda's |W|*||X_j||, ...); anything else is an
// nms::Error naming the element.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {

enum class SolveStatus {
  kOptimal,       // every tile solved to proven optimality of the "= n" problem
  kFeasible,      // valid (<= n everywhere) but not proven optimal
  kNotConverged,  // an iterative solver hit its iteration limit; the mask is still valid
};

struct TransposableStats {
  SolveStatus status = SolveStatus::kFeasible;
  double objective = 0.0;  // sum of kept scores, accumulated in double
  int64_t tiles = 0;
  int64_t tiles_exactly_n = 0;  // tiles whose every row and column keeps exactly n
  int64_t iterations = 0;       // solver-specific (augmentations, Dykstra sweeps, swaps), summed
};

struct TransposableResult {
  BitMask mask;
  TransposableStats stats;
};

// Throws unless rows % m == 0, cols % m == 0, the pattern is valid, and every score is finite and
// non-negative.
void check_transposable_input(ConstMatrixViewF scores, NmPattern pattern);

// Sum of scores(i, j) over the set bits of `mask`, in double.
double mask_score(ConstMatrixViewF scores, const BitMask& mask);

// Number of whole m x m tiles of `mask` that keep exactly n in every tile row and column.
int64_t count_tiles_exactly_n(const BitMask& mask, NmPattern pattern);

// Independent self-check: shape, <= n per tile row and column (== n when require_exactly_n),
// stats.tiles_exactly_n and stats.objective recomputed (relative tolerance 1e-9). Throws
// nms::Error describing the first discrepancy.
void check_transposable_result(ConstMatrixViewF scores, NmPattern pattern,
                               const TransposableResult& result, bool require_exactly_n);

// Exact solver: per tile, the maximum kept score with exactly n in every tile row and column
// (proven by a dual certificate per tile; see src/mask/transposable_exact.cpp for the arithmetic
// and its tolerance). 2:4 is solved by exhaustive search over the 90 valid 4 x 4 patterns, other
// patterns by successive shortest paths on the dense tile graph from a dual-balanced row-wise
// start, O(n m^3) per tile in the worst case and a few O(m^2) augmentations in practice.
// stats.status = kOptimal; stats.iterations = augmentations after the start (0 for 2:4 and for
// n == m).
TransposableResult mask_transposable_exact(ConstMatrixViewF scores, NmPattern pattern);

enum class GreedyOrder {
  kKeepHeavyFirst,   // descending score; keep (i, j) while its tile row and column keep < n.
                     // A 1/2-approximation of the kept score. Ties: lower tile-local index first.
  kPruneLightFirst,  // the paper's variant: ascending score; prune (i, j) while its tile row OR
                     // column has pruned < m - n. Pruned score <= 2x the optimum. Ties: higher
                     // tile-local index pruned first (the exact reverse of the keep order).
};

// Greedy 2-approximation; always valid (<= n per tile row and column), often fewer than n.
// stats.status = kFeasible; stats.iterations = sorted entries visited (summed over tiles).
TransposableResult mask_transposable_greedy(ConstMatrixViewF scores, NmPattern pattern,
                                            GreedyOrder order = GreedyOrder::kKeepHeavyFirst);

// Entropic solver (TSENOR-style; src/mask/transposable_entropic.cpp): per tile, log-domain
// Dykstra on the entropy-regularised LP (scores divided by the tile max), greedy rounding of the
// fractional solution, up to local_search_steps 3-edge swaps, then (repair) max-weight augmenting
// paths until every row and column keeps exactly n. Defaults measured on i.i.d. |N(0,1)| tiles:
// mean gap to the exact "= n" optimum about 0.05-0.1 % for 4:8..16:32 (see the .cpp header).
struct EntropicOptions {
  float temperature = 100.0f;   // tau > 0; larger is closer to the LP but converges more slowly
  int iterations = 300;         // Dykstra sweeps T (row, column and box projection each)
  int local_search_steps = 10;  // L
  bool repair = true;           // fill every tile to exactly n per row and column
};

// status is kFeasible; stats.iterations sums Dykstra sweeps, swaps and repair augmentations.
// Throws like check_transposable_input, and for a non-positive or non-finite temperature or
// negative iterations / local_search_steps.
TransposableResult mask_transposable_entropic(ConstMatrixViewF scores, NmPattern pattern,
                                              const EntropicOptions& options = {});

// The solvers by the names tools and recipes use: "exact" | "greedy" | "entropic".
enum class TransposableSolver { kExact, kGreedy, kEntropic };
std::string_view transposable_solver_name(TransposableSolver solver);
std::optional<TransposableSolver> transposable_solver_from_name(std::string_view name);

// The chosen solver with its default options (greedy: kKeepHeavyFirst).
TransposableResult mask_transposable(ConstMatrixViewF scores, NmPattern pattern,
                                     TransposableSolver solver);

}  // namespace nms
