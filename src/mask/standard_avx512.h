// PRIVATE header: the AVX-512 row kernel of the standard masks (standard_avx512.cpp, the only
// unit built with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

namespace nms::detail {

// Groups of 4 along one row (any n in 1..4), 64 columns (one mask word) per step: ORs the kept
// bits into words[0 .. cols / 64) and returns the columns done (cols rounded down to 64). `abs`:
// rank |row| (mask_nm_magnitude) instead of row (mask_nm_rows). valid is false when a done
// column's score is not >= 0 after the transform (negative or NaN); the caller then reports it.
int64_t mask_row4_avx512(const float* row, int64_t cols, int n, bool abs, uint64_t* words,
                         bool& valid);

}  // namespace nms::detail
