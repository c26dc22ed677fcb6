// PRIVATE: the AVX-512 block of transpose_into (nmsparse/kernels/transpose.h).
#pragma once

#include <cstdint>

namespace nms::detail {

// dst[j][k] = rows[k][j] for j < 16, k < 16: rows[k] points at 16 readable floats, dst rows are
// ld_dst apart.
void transpose16_avx512(const float* const rows[16], float* dst, int64_t ld_dst);

}  // namespace nms::detail
