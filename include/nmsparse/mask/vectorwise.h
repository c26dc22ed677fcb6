// Vector-wise N:M masks: the rows of W in blocks of `block_rows` consecutive rows share one index
// set per group. For block B and the group G of m consecutive columns, the kept columns are the n
// with the largest summed score Σ_{i in B} s_ij (ties towards the lower column), and every row of
// the block keeps exactly those. Each row is still N:M (all kernels and formats apply); with
// block_rows a multiple of 6 the forward kernel's micro-tiles share every kept column and
// nm_gemm runs its operand-reuse path (see nm_gemm.h), at the cost of a smaller mask space:
// per block and group C(m, n) choices instead of C(m, n)^block_rows (a model-quality trade-off
// the user opts into; NM-SpMM and VENOM use the same structure on GPUs).
//
// Scores: finite and non-negative (|W| for magnitude); the sums are accumulated in double.
// Complexity O(rows · cols) plus the row-wise top-n of the block sums; parallel over blocks, the
// result does not depend on the thread count.
#pragma once

#include <cstdint>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {

// cols % m == 0 and block_rows >= 1 required (throws otherwise); the last block may be shorter.
BitMask mask_nm_vectorwise(ConstMatrixViewF scores, NmPattern pattern, int64_t block_rows);

}  // namespace nms
