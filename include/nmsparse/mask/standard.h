// Standard (row-wise) N:M masks: in every group of m consecutive elements of a row, keep the n with
// the largest score.
//
// Maths: for the group G = {j0, ..., j0+m-1} of row i, element j is kept iff
//   rank(j) = #{k in G : s_k > s_j or (s_k == s_j and k < j)} < n,
// i.e. the top n by score with ties broken towards the lower index (deterministic, unlike
// torch.topk). Exactly n elements are kept in every group, zeros included: this is the "= n"
// optimum, which is also the best "<= n" mask for non-negative scores.
//
// Scores: any non-negative matrix (|W| for magnitude pruning, |W|*||X_j|| for Wanda, ...).
// Negative scores and NaN are rejected with the offending index; +Inf ranks above every finite.
//
// Complexity: O(rows * cols * m) comparisons for m <= 16 (rank counting, branch-free), O(rows *
// cols * log n) beyond; memory O(1) besides the output. Parallel over rows; the result does not
// depend on the thread count.
#pragma once

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {

// Top-n-of-m mask of `scores` along rows. Requires cols % m == 0 (throws otherwise).
BitMask mask_nm_rows(ConstMatrixViewF scores, NmPattern pattern);

// Magnitude mask: mask_nm_rows on |weights|. NaN weights are rejected (their rank is undefined).
BitMask mask_nm_magnitude(ConstMatrixViewF weights, NmPattern pattern);

// Zeroes every element whose mask bit is clear, writing +0.0. Shapes must match.
void apply_mask(MatrixViewF weights, const BitMask& mask);

}  // namespace nms
