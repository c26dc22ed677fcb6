// PRIVATE header, AVX2 translation units only (it uses their target flags): the in-register 8 x 8
// fp32 transpose shared by nm_gemm's AVX2 panel packing and transpose_into.
#pragma once

#include <immintrin.h>

namespace nms::detail {

// In-register 8 x 8 transpose: r[i] lane j -> r[j] lane i (24 shuffles).
inline void transpose8(__m256 r[8]) {
  __m256 a[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 b[8];
  for (int j = 0; j < 2; ++j) {
    b[4 * j] = _mm256_shuffle_ps(a[4 * j], a[4 * j + 2], 0x44);
    b[4 * j + 1] = _mm256_shuffle_ps(a[4 * j], a[4 * j + 2], 0xEE);
    b[4 * j + 2] = _mm256_shuffle_ps(a[4 * j + 1], a[4 * j + 3], 0x44);
    b[4 * j + 3] = _mm256_shuffle_ps(a[4 * j + 1], a[4 * j + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(b[q], b[4 + q], 0x20);
    r[4 + q] = _mm256_permute2f128_ps(b[q], b[4 + q], 0x31);
  }
}

}  // namespace nms::detail
