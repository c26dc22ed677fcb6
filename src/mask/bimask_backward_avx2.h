// PRIVATE header: the AVX2 body of bimask_backward (bimask_backward_avx2.cpp, the only unit built
// with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

// bimask_backward_group_avx512's contract (bimask_backward_avx512.h), 8 columns per step.
void bimask_backward_group_avx2(const float* w, int64_t ld, int64_t cols, const uint64_t* fwd,
                                uint64_t* bwd, int64_t words_per_row, const int64_t* perm, int n,
                                int m);

}  // namespace nms::detail
