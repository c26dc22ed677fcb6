// PRIVATE: the AVX-512 block of transpose_into (nmsparse/kernels/transpose.h).
#pragma once

#include <cstdint>

namespace nms::detail {

// dst[j][k] = rows[k][j] for j < 16, k < 16: rows[k] points at 16 readable floats, dst rows are
// ld_dst apart.
// With `stream`, dst and ld_dst · 4 must be multiples of 64 bytes: the 16 rows are written with
// non-temporal stores, and the caller ends its writes with stream_fence_avx512().
void transpose16_avx512(const float* const rows[16], float* dst, int64_t ld_dst, bool stream);
void stream_fence_avx512();

}  // namespace nms::detail
