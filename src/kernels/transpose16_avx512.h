// PRIVATE header, AVX-512 translation units only (it uses their target flags): the in-register
// 16 x 16 fp32 transpose shared by nm_gemm's panel packing and transpose_into, and the Yᵀ-form
// tile load and store of the permute kernels (fp32 and bf16) built on it.
#pragma once

#include <immintrin.h>

#include <cstdint>

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

// A Yᵀ-form tile's registers from its 32 rows: row_of(k) gives row k's RT tokens (8 floats, the
// rest 0); acc0[t] / acc1[t] = rows 0..15 / 16..31 of token t. Register r[k] holds rows k and
// k + 16 (8 tokens each); the transpose turns it into r[t] = rows 0..15 of token t and r[8 + t] =
// rows 16..31.
template <int RT, class RowOf>
inline void load_rows_transposed(RowOf&& row_of, __m512 acc0[RT], __m512 acc1[RT]) {
  __m512 r[16];
  for (int k = 0; k < 16; ++k) {
    r[k] = _mm512_insertf32x8(_mm512_castps256_ps512(row_of(k)), row_of(k + 16), 1);
  }
  transpose16(r);
  for (int t = 0; t < RT; ++t) {
    acc0[t] = r[t];
    acc1[t] = r[8 + t];
  }
}

// The inverse: store_row(k, row k's 8 floats) for the rows k < real.
template <int RT, class StoreRow>
inline void store_rows_transposed(const __m512 acc0[RT], const __m512 acc1[RT], int64_t real,
                                  StoreRow&& store_row) {
  __m512 r[16];
  for (int t = 0; t < 8; ++t) {
    r[t] = t < RT ? acc0[t] : _mm512_setzero_ps();
    r[8 + t] = t < RT ? acc1[t] : _mm512_setzero_ps();
  }
  transpose16(r);
  for (int k = 0; k < 16; ++k) {
    if (k < real) store_row(k, _mm512_castps512_ps256(r[k]));
    if (k + 16 < real) store_row(k + 16, _mm512_extractf32x8_ps(r[k], 1));
  }
}

}  // namespace nms::detail
