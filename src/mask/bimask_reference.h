// PRIVATE header: obviously-correct Bi-Mask reference (tests only). Same definitions as
// nmsparse/mask/bimask.h, computed element by element with sorts and full re-scoring.
#pragma once

#include <vector>

#include "nmsparse/mask/bimask.h"

namespace nms::reference {

// Per (group, column): the forward-kept entries stably sorted by descending |w| (so equal values
// keep the lower permuted index first), the first n kept.
BitMask bimask_backward(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                        const std::vector<int64_t>& perm);

// kept = |backward|, eligible = column groups with at most n forward-kept entries, by counting.
BiMaskScore bimask_score(ConstMatrixViewF weights, const BitMask& forward, NmPattern pattern,
                         const std::vector<int64_t>& perm);

// The whole search with the same candidates and proposal sequence, every score recomputed from
// the backward mask of the full matrix.
BiMaskResult bimask(ConstMatrixViewF weights, NmPattern pattern, const BiMaskOptions& options);

}  // namespace nms::reference
