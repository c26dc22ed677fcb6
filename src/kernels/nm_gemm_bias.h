// PRIVATE header: nm_gemm's bias term, added by each work item to the block of Y it has just
// written (still in L1/L2) instead of in a separate pass over Y.
#pragma once

#include <cstdint>

namespace nms::detail {

// y(t, r) += bias[r] for t in [t0, t1), r in [r0, r1): one rounded addition per element, the same
// bits as adding the bias after the product. No-op when bias is null.
inline void add_bias(float* y, int64_t ldy, int64_t t0, int64_t t1, int64_t r0, int64_t r1,
                     const float* bias) {
  if (bias == nullptr) return;
  for (int64_t t = t0; t < t1; ++t) {
    float* row = y + t * ldy;
    for (int64_t r = r0; r < r1; ++r) row[r] += bias[r];
  }
}

}  // namespace nms::detail
