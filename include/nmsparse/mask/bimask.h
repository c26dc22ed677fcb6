// Bi-Mask (Zhang et al. 2023): a forward N:M mask along `in` and a separate backward N:M mask along
// the (permuted) `out` axis, with a search for the row permutation that keeps the most of the
// forward mask in the backward one.
//
// Maths. W is [out, in] (PyTorch Linear), p = n:m.
//   Forward mask   M_f = mask_nm_magnitude(W, p): top-n |W| of every m consecutive elements of a
//                  row (ties to the lower index; exactly n per group, zeros included).
//   Permutation    perm[i] = the original row placed at position i (0 <= i < out).
//   Backward mask  in the permuted order, rows i = g*m .. g*m+m-1 form group g. For every column j
//                  and group g let K = {i in group g : M_f(perm[i], j) = 1} (the forward-kept
//                  entries). If |K| <= n all of K is kept; otherwise the n of K with the largest
//                  |W(perm[i], j)| are kept, ties to the lower permuted index i. M_b is returned
//                  in the ORIGINAL row order: M_b(perm[i], j) = kept(i, j).
//   Zeros.         Selection is among forward-kept positions only, so a forward-kept weight whose
//                  value is exactly 0 outranks every forward-pruned position (in "top-n of
//                  |W ⊙ M_f| then ⊙ M_f" terms: ties at 0 favour kept positions, then the lower
//                  permuted index). Consequence: the number of backward-kept entries of a
//                  (group, column) is exactly min(|K|, n), whatever the values, so the score of a
//                  permutation depends on the forward-mask bits alone. A kept zero contributes 0 to
//                  either GEMM, so this choice changes no product, only the bookkeeping.
// Invariants: M_b ⊆ M_f; M_b permuted (row i = M_b row perm[i]) is n:m along columns, i.e.
//   verify_nm(permute_rows(M_b, perm), p).cols_valid(); M_b is "at most n" (a column group with
//   fewer than n forward-kept entries keeps them all and no more).
//
// Scores of a permutation (both computed for every candidate):
//   kept     = |M_b| = sum over (group, column) of min(|K|, n)  (what the reference code
//              maximises; retained fraction = kept / |M_f|).
//   eligible = #(group, column) with |K| <= n: blocks that are already n:m backwards (the paper's
//              "eligible N:M blocks").
// Default criterion: kept. It is the quantity that matters (how many forward weights the backward
// pass still sees), it grades how badly a block overflows where `eligible` only says whether it
// does, and on 2:4 i.i.d. weights `eligible` is a coarse step function with many ties between
// candidates. Ties on the selected criterion fall to the other one, then to the lower candidate.
//
// Search.
//   random   the identity (candidate 0) plus K uniformly random permutations (candidate c =
//            1..K is a Fisher-Yates shuffle driven by CounterRng(seed, c)); the best wins. The
//            identity is always a candidate, so best >= identity.
//   improve  the random search, then hill climbing from its winner: proposals are row pairs
//            (a, b) in different groups drawn from CounterRng(seed, 0); a swap is accepted when
//            it strictly improves (criterion, other criterion). A proposal re-scores two groups
//            (O(m * n * words) word operations, words = ceil(in / 64)), a candidate of the random
//            search re-scores all out / m groups, so the default budget of K * out / (2m)
//            proposals costs the same as the K random candidates.
// Scoring is bit-parallel: for the m rows of a group, the "at least t kept" bitmaps
// c_t (t = 1..n+1) over 64 columns per word follow c_t |= c_{t-1} & x for each row word x;
// kept = sum_t<=n popcount(c_t), eligible = popcount(~c_{n+1} & valid bits).
//
// Complexity: forward mask O(out * in * m); one candidate O(out * n * words) word operations
// (+ O(out) RNG for its shuffle); backward mask O(out * words + overflowing blocks * m log m).
// Memory O(out * words) words. Parallel over candidates; the result is bitwise the same for any
// thread count (each candidate's permutation depends only on (seed, c), the climb is sequential).
// Measured (bench/bench_bimask.cpp, 3072 x 768, one thread, CPU time on the shared 2-core VM):
// masks + identity + 100 random candidates 14 ms (2:4), 18 ms (4:8), 12 ms (1:4); improve (the
// same + climb) 19-24 / 21 / 15 ms. Retained fraction identity -> best random -> improved:
//   Gaussian    2:4 0.8129 -> 0.8131 -> 0.8291   4:8 0.8636 -> 0.8637 -> 0.8754
//               1:4 0.6839 -> 0.6847 -> 0.7127
//   structured  2:4 0.7571 -> 0.7581 -> 0.7742   4:8 0.7907 -> 0.7913 -> 0.8025
//               1:4 0.5762 -> 0.5789 -> 0.6061
// Doubling the random candidates (same cost as improve) gains at most 0.0003 over K = 100.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

enum class BiMaskCriterion { kKept, kEligible };
enum class BiMaskSearch { kRandom, kImprove };

std::string_view criterion_name(BiMaskCriterion c);  // "kept" / "eligible"
std::string_view search_name(BiMaskSearch s);        // "random" / "improve"

struct BiMaskOptions {
  int candidates = 100;  // K random permutations besides the identity; 0 <= K <= 1'000'000
  BiMaskSearch search = BiMaskSearch::kImprove;
  BiMaskCriterion criterion = BiMaskCriterion::kKept;
  uint64_t seed = 0;
  // Hill-climbing proposals; -1 = K * out / (2m) (the cost of the random search), at least 1.
  int64_t improve_proposals = -1;
};

// Both scores of one permutation.
struct BiMaskScore {
  int64_t kept = 0;      // |M_b|
  int64_t eligible = 0;  // column groups with at most n forward-kept entries
  friend bool operator==(const BiMaskScore&, const BiMaskScore&) = default;
};

struct BiMaskResult {
  NmPattern pattern;
  std::vector<int64_t> perm;  // perm[i] = original row at permuted position i
  BitMask forward;            // M_f, [out, in]
  BitMask backward;           // M_b, [out, in], original row order, ⊆ forward
  int64_t forward_kept = 0;   // |M_f| = out * in / m * n
  int64_t column_groups = 0;  // out / m * in

  BiMaskScore identity;     // candidate 0
  BiMaskScore best_random;  // best of identity + K random candidates
  BiMaskScore final_score;  // the returned permutation (== best_random for kRandom)
  int best_candidate = 0;   // 0 = identity, c = random candidate c
  int64_t proposals = 0;    // hill-climbing proposals evaluated
  int64_t accepted = 0;     // swaps accepted

  // kept / |M_f| (1.0 for an empty matrix).
  double fraction(const BiMaskScore& s) const {
    return forward_kept == 0 ? 1.0
                             : static_cast<double>(s.kept) / static_cast<double>(forward_kept);
  }
  double retained() const { return fraction(final_score); }
};

// Masks and permutation search for W [out, in]. Throws nms::Error when m does not divide out or
// in, for a NaN weight, or for K outside [0, 1'000'000] / improve_proposals < -1.
BiMaskResult bimask(ConstMatrixViewF weights, NmPattern pattern, const BiMaskOptions& options = {});

// The backward mask of W for a given permutation (M_f from W). Throws as bimask, and when `perm`
// is not a permutation of 0 .. out-1.
BitMask bimask_backward(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                        const std::vector<int64_t>& perm);

// Scores of `perm` from the forward-mask bits alone (see the header comment).
BiMaskScore bimask_score(const BitMask& forward, NmPattern pattern,
                         const std::vector<int64_t>& perm);

// Random candidate c >= 1 of the search (c = 0 is the identity): a Fisher-Yates shuffle of
// 0 .. rows-1 whose step i draws j = floor(u * (i + 1)) from the 32-bit word u of
// CounterRng(seed, c) (bias below (i + 1) / 2^32).
std::vector<int64_t> bimask_candidate(int64_t rows, uint64_t seed, int candidate);

// Row i of the result is row perm[i] of `mask`.
BitMask permute_rows(const BitMask& mask, const std::vector<int64_t>& perm);

// The backward-data operand for the kernels: P (W ⊙ M_b) with P the row permutation (row i =
// W row perm[i]), compressed with NmAxis::kCols, i.e. the groups of m run along the permuted `out`
// axis and values are (in, out / m * n): value row j is column j of the permuted, masked W — the
// compressed (P W_b)^T. dX = dY W_b = (dY P^T)(P W_b): the kernel multiplies dY with its columns
// reordered by perm (column i of the reordered dY = column perm[i] of dY) by this operand.
CompressedNm bimask_backward_operand(ConstMatrixViewF weights, const BiMaskResult& result);

}  // namespace nms
