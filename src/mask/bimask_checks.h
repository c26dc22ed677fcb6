// PRIVATE header: the input checks of nmsparse/mask/bimask.h, shared with the CUDA backend's
// bimask_backward_gpu so that both refuse the same inputs with the same messages.
#pragma once

#include <cstdint>
#include <vector>

#include "nmsparse/core/error.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms::detail {

inline void bimask_check_shape(int64_t rows, int64_t cols, NmPattern p, const char* who) {
  p.validate();
  NMS_CHECK(rows % p.m == 0, who, ": out (", rows, ") is not a multiple of m (", p.m, ")");
  NMS_CHECK(cols % p.m == 0, who, ": in (", cols, ") is not a multiple of m (", p.m, ")");
  NMS_CHECK(rows < (int64_t{1} << 32), who, ": out (", rows, ") must be below 2^32");
}

inline void bimask_check_perm(const std::vector<int64_t>& perm, int64_t rows) {
  NMS_CHECK(static_cast<int64_t>(perm.size()) == rows, "permutation has ", perm.size(),
            " entries for ", rows, " rows");
  std::vector<char> seen(static_cast<size_t>(rows), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t r = perm[i];
    NMS_CHECK(r >= 0 && r < rows && !seen[static_cast<size_t>(r)], "perm[", i, "] = ", r,
              " makes it no permutation of 0..", rows - 1);
    seen[static_cast<size_t>(r)] = 1;
  }
}

}  // namespace nms::detail
