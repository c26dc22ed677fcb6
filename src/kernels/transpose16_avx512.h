// PRIVATE header, AVX-512 translation units only (it uses their target flags): the in-register
// 16 x 16 fp32 transpose shared by nm_gemm's panel packing and transpose_into.
#pragma once

#include <immintrin.h>

namespace nms::detail {

// In-register 16 x 16 transpose: r[i] lane j -> r[j] lane i (64 shuffles).
inline void transpose16(__m512 r[16]) {
  __m512 a[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 b[16];  // b[4j + q], 128-bit lane L: column 4L + q of rows 4j .. 4j + 3
  for (int j = 0; j < 4; ++j) {
    const __m512d a0 = _mm512_castps_pd(a[4 * j]);
    const __m512d a1 = _mm512_castps_pd(a[4 * j + 1]);
    const __m512d a2 = _mm512_castps_pd(a[4 * j + 2]);
    const __m512d a3 = _mm512_castps_pd(a[4 * j + 3]);
    b[4 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    b[4 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    b[4 * j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    b[4 * j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 c01 = _mm512_shuffle_f32x4(b[q], b[4 + q], 0x88);
    const __m512 c01h = _mm512_shuffle_f32x4(b[q], b[4 + q], 0xDD);
    const __m512 c23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0x88);
    const __m512 c23h = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0xDD);
    r[q] = _mm512_shuffle_f32x4(c01, c23, 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(c01, c23, 0xDD);
    r[4 + q] = _mm512_shuffle_f32x4(c01h, c23h, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(c01h, c23h, 0xDD);
  }
}

}  // namespace nms::detail
