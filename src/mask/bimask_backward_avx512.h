// PRIVATE header: the AVX-512 body of bimask_backward (bimask_backward_avx512.cpp, the only unit
// built with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

// Rows perm[0..m) (m <= 16) of the backward mask, all columns, from the weights (row stride ld,
// `cols` columns) and the forward mask words (row stride words_per_row): the rule of
// bimask_backward_group.h, 16 columns per step. Writes every word of those rows.
void bimask_backward_group_avx512(const float* w, int64_t ld, int64_t cols, const uint64_t* fwd,
                                  uint64_t* bwd, int64_t words_per_row, const int64_t* perm, int n,
                                  int m);

}  // namespace nms::detail
