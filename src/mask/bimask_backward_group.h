// PRIVATE header: one (group, column) of the Bi-Mask backward mask in host-device code
// (core/host_device.h), the rule of nmsparse/mask/bimask.h: among the forward-kept entries of
// the permuted rows perm[0..m) in column j, keep the n with the largest |W|, ties to the lower
// permuted offset; all of them when at most n are forward-kept. The CUDA backend runs it per
// (group, column); tests/cuda/kernel_bodies_test.cpp holds that thread body against
// bimask_backward on the host.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace nms::detail {

// Bit k of the result: keep W(perm[k], j). fwd: the forward mask's words (row r at
// fwd + r * words_per_row).
NMS_HD inline uint64_t bimask_backward_group(const float* w, int64_t ld, const uint64_t* fwd,
                                             int64_t words_per_row, const int64_t* perm, int n,
                                             int m, int64_t j) {
  uint64_t eligible = 0;
  for (int k = 0; k < m; ++k) {
    const uint64_t word = fwd[perm[k] * words_per_row + (j >> 6)];
    eligible |= ((word >> (j & 63)) & 1) << k;
  }
  if (popcount64_hd(eligible) <= n) return eligible;
  uint64_t kept = 0;
  for (int k = 0; k < m; ++k) {
    if (!((eligible >> k) & 1)) continue;
    const float ak = fabsf(w[perm[k] * ld + j]);
    int above = 0;
    for (int q = 0; q < m; ++q) {
      if (!((eligible >> q) & 1)) continue;
      const float aq = fabsf(w[perm[q] * ld + j]);
      above += aq > ak || (aq == ak && q < k);
    }
    if (above < n) kept |= uint64_t{1} << k;
  }
  return kept;
}

}  // namespace nms::detail
