// PRIVATE header: the per-group gradient pruners (the specification every optimised path must
// reproduce bit for bit) and the group-id / randomness conventions of nmsparse/grad/prune.h.
#pragma once

#include <cstdint>

#include "nmsparse/core/rng.h"
#include "nmsparse/grad/prune.h"

namespace nms::detail {

// Group id of the group whose first element is (r, c) (see prune.h).
inline uint64_t grad_group_id(NmAxis axis, int64_t r, int64_t c, int64_t rows, int64_t cols,
                              int m) {
  (void)rows;
  return axis == NmAxis::kRows ? static_cast<uint64_t>(r * (cols / m) + c / m)
                               : static_cast<uint64_t>((r / m) * cols + c);
}

// Uniform number `which` (0 or 1) of group `gid` for `method`.
inline float grad_uniform(const CounterRng& rng, GradMethod method, uint64_t gid, int which) {
  return method == GradMethod::kMvueApprox24 ? rng.uniform(2 * gid + static_cast<uint64_t>(which))
                                             : rng.uniform(gid);
}

// Prunes one group: g[0..m) finite inputs, u0/u1 uniforms in [0, 1), out[0..m) the dense result
// (+0.0 where pruned). Returns false (out unspecified) when the magnitude sum overflows fp32.
bool prune_group(GradMethod method, int n, int m, const float* g, float u0, float u1, float* out);

}  // namespace nms::detail
