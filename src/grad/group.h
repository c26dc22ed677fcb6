// PRIVATE header: the group-id / randomness conventions of nmsparse/grad/prune.h, with the
// per-group pruners (grad/group_kernel.h, the specification every optimised path must reproduce
// bit for bit).
#pragma once

#include <cstdint>

#include "grad/group_kernel.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/grad/prune.h"

namespace nms::detail {

// Group id of the group whose first element is (r, c) (see prune.h).
NMS_HD inline uint64_t grad_group_id(NmAxis axis, int64_t r, int64_t c, int64_t rows, int64_t cols,
                                     int m) {
  (void)rows;
  return axis == NmAxis::kRows ? static_cast<uint64_t>(r * (cols / m) + c / m)
                               : static_cast<uint64_t>((r / m) * cols + c);
}

// Uniform number `which` (0 or 1) of group `gid` for `method`.
NMS_HD inline float grad_uniform(const CounterRng& rng, GradMethod method, uint64_t gid,
                                 int which) {
  return method == GradMethod::kMvueApprox24 ? rng.uniform(2 * gid + static_cast<uint64_t>(which))
                                             : rng.uniform(gid);
}

}  // namespace nms::detail
