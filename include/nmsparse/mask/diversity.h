// Mask diversity (Hubara et al., 2021): how many masks a sparsity structure allows on one m x m
// tile, a proposed predictor of the accuracy a structure can reach.
//
//   row-wise N:M:      C(m, n)^m  (each of the m rows picks its n kept columns freely)
//   transposable N:M:  the number of m x m 0/1 matrices whose every row and column sums to n.
// The transposable count has no closed form; it is computed exactly by dynamic programming over
// the rows with columns grouped by how many ones they still need (columns are exchangeable, so
// the state is the vector of class sizes). Cost grows quickly with m: milliseconds up to m = 12,
// seconds at m = 16; larger m is refused (kMaxTransposableDiversityM).
// Known values, asserted in the tests: 90 (2:4), 116,963,796,250 (4:8), 187,530,840 (2:8).
// Note: the closed form (prod_{k<n} (m-k)!) quoted for transposable diversity in a secondary
// summary overcounts (144 instead of 90 for 2:4); these are exact counts.
#pragma once

#include <string>

#include "nmsparse/core/nm_pattern.h"

namespace nms {

inline constexpr int kMaxTransposableDiversityM = 16;

struct MaskDiversity {
  std::string exact;   // the count in decimal
  double log10 = 0.0;  // log10 of the count
};

// Row-wise N:M masks of one m x m tile: C(m, n)^m, exact.
MaskDiversity diversity_rowwise_tile(NmPattern pattern);
// Transposable N:M masks of one m x m tile, exact. Throws for m > kMaxTransposableDiversityM.
MaskDiversity diversity_transposable_tile(NmPattern pattern);

}  // namespace nms
