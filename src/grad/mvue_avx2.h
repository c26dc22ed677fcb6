// PRIVATE header: the AVX2 MVUE 2:4 kernel along columns (mvue_avx2.cpp, a translation unit of
// its own built with AVX2 flags; callers check isa_active() == Isa::kAvx2 first). It performs the
// float operations of detail::prune_group for 2:4 MVUE (group.cpp) in the same order as the SSE2
// and AVX-512 kernels, 8 groups per vector, so results are bit-identical to them.
#pragma once

#include <cstdint>

#include "grad/mvue_avx512.h"  // Mvue24Key

namespace nms::detail {

// mvue24_cols_avx512's contract (mvue_avx512.h) in units of 32 columns instead of blocks of 16:
// `units` <= kColsMaxUnitsAvx2 units starting at src (group kk of column l: rows 4kk .. 4kk + 3,
// id kk * cols + col0 + l; cols % 4 == 0, col0 % 4 == 0). Dense or compressed output as there.
constexpr int64_t kColsMaxUnitsAvx2 = 16;  // 512 columns per call
bool mvue24_cols_avx2(const float* src, int64_t ld, int64_t group_rows, int64_t units, int64_t cols,
                      int64_t col0, const Mvue24Key& key, float* dense, int64_t dense_ld,
                      float* values, int64_t value_ld, uint8_t* indices, int64_t index_ld);

// Any n:m MVUE (m <= 64) along columns, mvue_cols_avx512's contract (mvue_avx512.h) in units of
// 32 columns: the operations of mvue_group (group.cpp), water-filling caps and systematic
// sampling with per-lane masks, 8 columns per vector, bitwise its results. Compressed output
// writes n values and n `bits`-wide in-group indices per group (canonical fill; index rows zeroed
// beforehand).
bool mvue_cols_avx2(const float* src, int64_t ld, int n, int m, int64_t group_rows, int64_t units,
                    int64_t cols, int64_t col0, const Mvue24Key& key, float* dense,
                    int64_t dense_ld, float* values, int64_t value_ld, uint8_t* indices,
                    int64_t index_ld, int bits);

}  // namespace nms::detail
