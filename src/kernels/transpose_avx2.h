// PRIVATE: the AVX2 block of transpose_into (nmsparse/kernels/transpose.h).
#pragma once

#include <cstdint>

namespace nms::detail {

// dst[j][k] = rows[k][j] for j < 16, k < 16 (four 8 x 8 in-register transposes): rows[k] points
// at 16 readable floats, dst rows are ld_dst apart. With `stream`, dst and ld_dst · 4 must be
// multiples of 32 bytes: the rows are written with non-temporal stores, and the caller ends its
// writes with stream_fence_avx2().
void transpose16_avx2(const float* const rows[16], float* dst, int64_t ld_dst, bool stream);
void stream_fence_avx2();

}  // namespace nms::detail
