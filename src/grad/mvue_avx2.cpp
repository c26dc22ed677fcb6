// AVX2 MVUE 2:4 kernel along columns (see mvue_avx2.h). Compiled with -mavx2 -mfma and
// -ffp-contract=off; includes nothing that defines inline functions shared with other units.
// Per group row, per unit of 32 columns: one Philox4x32-10 call on 8 blocks (the unit's 32 random
// words), four 8-column vectors of groups through the same operations as the SSE2 kernel
// (prune.cpp), and the compressed results staged for tiles of 8 group rows, so each column gets
// 64 contiguous bytes of values and 4 bytes of indices per tile (the SSE2 loop writes 8 bytes per
// column and group row, one value row apart: 0.9 GB/s at 8192 x 3072 on Zen 2).
#include "grad/mvue_avx2.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "grad/code24.h"
#include "grad/emit_lanes.h"

namespace nms::detail {
namespace {

// 64-bit products of the 8 lanes of `a` with `mul`: high and low 32-bit halves.
inline void mulhilo(__m256i a, __m256i mul, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, mul);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), mul);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Philox4x32-10 of blocks base .. base + 7, as CounterRng: u[q] lane l = word l % 4 of block
// base + 2q + l / 4, i.e. the random word of group 8q + l of the 32 the blocks cover.
inline void philox8(uint64_t base, const Mvue24Key& key, __m256i u[4]) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // The 8 block counters' low and high words (base + l never wraps the high word in practice;
  // it is computed exactly anyway).
  const auto lo = static_cast<uint32_t>(base);
  const __m256i c_lo = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(lo)), lanes);
  const __m256i carry = _mm256_cmpgt_epi32(
      _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(lo)), _mm256_set1_epi32(INT32_MIN)),
      _mm256_xor_si256(c_lo, _mm256_set1_epi32(INT32_MIN)));  // unsigned lo > lo + l
  __m256i c0 = c_lo;
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(base >> 32)), carry);
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(key.stream_lo));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(key.stream_hi));
  __m256i k0 = _mm256_set1_epi32(static_cast<int>(key.seed_lo));
  __m256i k1 = _mm256_set1_epi32(static_cast<int>(key.seed_hi));
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m256i weyl0 = _mm256_set1_epi32(static_cast<int>(0x9E3779B9u));
  const __m256i weyl1 = _mm256_set1_epi32(static_cast<int>(0xBB67AE85u));
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = _mm256_add_epi32(k0, weyl0);
      k1 = _mm256_add_epi32(k1, weyl1);
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(c0, mul0, hi0, lo0);
    mulhilo(c2, mul1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), k0);
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), k1);
    c3 = lo0;
  }
  // Lanes are blocks, registers words -> per block its 4 words, two blocks per register.
  const __m256i a01 = _mm256_unpacklo_epi32(c0, c1);  // w0 w1 of blocks 0, 1 | 4, 5
  const __m256i a23 = _mm256_unpacklo_epi32(c2, c3);  // w2 w3 of blocks 0, 1 | 4, 5
  const __m256i b01 = _mm256_unpackhi_epi32(c0, c1);  // blocks 2, 3 | 6, 7
  const __m256i b23 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i p0 = _mm256_unpacklo_epi64(a01, a23);  // block 0 | block 4
  const __m256i p1 = _mm256_unpackhi_epi64(a01, a23);  // block 1 | block 5
  const __m256i p2 = _mm256_unpacklo_epi64(b01, b23);  // block 2 | block 6
  const __m256i p3 = _mm256_unpackhi_epi64(b01, b23);  // block 3 | block 7
  u[0] = _mm256_permute2x128_si256(p0, p1, 0x20);
  u[1] = _mm256_permute2x128_si256(p2, p3, 0x20);
  u[2] = _mm256_permute2x128_si256(p0, p1, 0x31);
  u[3] = _mm256_permute2x128_si256(p2, p3, 0x31);
}

// MVUE 2:4 of 8 groups (x[i] lane l = element i of group l; uw their random words): the
// operations of mvue24_x4 (prune.cpp) on 8 lanes. ORs non-finite inputs and overflowing sums of
// groups with at least three nonzeros into `bad`.
inline void mvue8(const __m256 x[4], __m256i uw, __m256 out[4], __m256i& bad) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  const __m256 zero = _mm256_setzero_ps();
  __m256 a[4];
  __m256i neg_nnz = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    a[i] = _mm256_and_ps(x[i], abs_mask);
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(x[i]), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
    neg_nnz = _mm256_add_epi32(neg_nnz, _mm256_castps_si256(_mm256_cmp_ps(a[i], zero, _CMP_GT_OQ)));
  }
  const __m256 small = _mm256_castsi256_ps(_mm256_cmpgt_epi32(neg_nnz, _mm256_set1_epi32(-3)));
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), a[2]), a[3]);
  const __m256 overflow = _mm256_cmp_ps(s, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ);
  bad = _mm256_or_si256(bad, _mm256_castps_si256(_mm256_andnot_ps(small, overflow)));
  const __m256 amax = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
  const __m256 case_c = _mm256_cmp_ps(_mm256_mul_ps(amax, _mm256_set1_ps(2.0f)), s, _CMP_GE_OQ);
  __m256 seen = zero;
  __m256 cap[4];
  __m256 prefix[5];
  prefix[0] = zero;
  for (int i = 0; i < 4; ++i) {
    const __m256 is_max = _mm256_andnot_ps(seen, _mm256_cmp_ps(a[i], amax, _CMP_EQ_OQ));
    seen = _mm256_or_ps(seen, is_max);
    cap[i] = _mm256_and_ps(case_c, is_max);
    prefix[i + 1] = _mm256_add_ps(prefix[i], _mm256_andnot_ps(cap[i], a[i]));
  }
  const __m256 total = prefix[4];
  const __m256 step = _mm256_blendv_ps(_mm256_mul_ps(total, _mm256_set1_ps(0.5f)), total, case_c);
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(uw, 8)),
                                 _mm256_set1_ps(1.0f / 16777216.0f));
  const __m256 t0 = _mm256_mul_ps(u, step);
  const __m256 t1 = _mm256_add_ps(t0, step);
  // In [prefix[i], prefix[i+1]): below the upper end and not below the lower one (8 comparisons
  // instead of 16; mvue_avx512.cpp's mvue16).
  __m256 below0_prev = zero;
  __m256 below1_prev = zero;
  for (int i = 0; i < 4; ++i) {
    const __m256 below0 = _mm256_cmp_ps(t0, prefix[i + 1], _CMP_LT_OQ);
    const __m256 below1 = _mm256_cmp_ps(t1, prefix[i + 1], _CMP_LT_OQ);
    const __m256 in0 = _mm256_andnot_ps(below0_prev, below0);
    const __m256 in1 = _mm256_andnot_ps(below1_prev, below1);
    below0_prev = below0;
    below1_prev = below1;
    const __m256 sel3 = _mm256_or_ps(cap[i], _mm256_or_ps(in0, in1));
    const __m256 val3 =
        _mm256_blendv_ps(_mm256_or_ps(_mm256_and_ps(x[i], sign_mask), step), x[i], cap[i]);
    const __m256 nz = _mm256_cmp_ps(a[i], zero, _CMP_GT_OQ);
    const __m256 sel = _mm256_blendv_ps(sel3, nz, small);
    const __m256 val = _mm256_blendv_ps(val3, x[i], small);
    out[i] = _mm256_and_ps(sel, val);
  }
}

// The two kept values (v0 the lower position) and the canonical index code of 8 results.
inline void select24(const __m256 out[4], __m256& v0, __m256& v1, __m256i& code) {
  const __m256 zero = _mm256_setzero_ps();
  __m256i nib = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256i kept = _mm256_castps_si256(_mm256_cmp_ps(out[i], zero, _CMP_NEQ_UQ));
    nib = _mm256_or_si256(nib, _mm256_and_si256(kept, _mm256_set1_epi32(1 << i)));
  }
  const __m256i table_lo = _mm256_setr_epi32(kCode24[0], kCode24[1], kCode24[2], kCode24[3],
                                             kCode24[4], kCode24[5], kCode24[6], kCode24[7]);
  const __m256i table_hi = _mm256_setr_epi32(kCode24[8], kCode24[9], kCode24[10], kCode24[11],
                                             kCode24[12], kCode24[13], kCode24[14], kCode24[15]);
  const __m256i high = _mm256_cmpgt_epi32(nib, _mm256_set1_epi32(7));
  code = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(table_lo, nib),
                            _mm256_permutevar8x32_epi32(table_hi, nib), high);
  const __m256i idx0 = _mm256_and_si256(code, _mm256_set1_epi32(3));
  const __m256i idx1 = _mm256_srli_epi32(code, 2);
  const auto is = [](__m256i idx, int k) {
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(idx, _mm256_set1_epi32(k)));
  };
  v0 = _mm256_blendv_ps(out[0], out[1], is(idx0, 1));
  v0 = _mm256_blendv_ps(v0, out[2], is(idx0, 2));
  v1 = _mm256_blendv_ps(out[3], out[2], is(idx1, 2));
  v1 = _mm256_blendv_ps(v1, out[1], is(idx1, 1));
}

constexpr int kTileRows = 8;  // group rows per tile: 64 bytes of values per column

// A full tile's kept pairs, block[t][l] = the 8 bytes of group row t, column l, stored as column
// l's 64 contiguous bytes at out + l · value_ld: four 4 x 4 transposes of 8-byte elements (bit
// moves only), 16 loads and 16 stores where copying pair by pair took 64 of each.
inline void store_tile_pairs(const uint64_t block[kTileRows][8], float* out, int64_t value_ld) {
  for (int h = 0; h < 2; ++h) {    // columns 4h .. 4h + 3
    for (int g = 0; g < 2; ++g) {  // group rows 4g .. 4g + 3
      __m256d r[4];
      for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_load_pd(reinterpret_cast<const double*>(&block[4 * g + i][4 * h]));
      }
      const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]);  // columns 0, 2 of rows 0, 1
      const __m256d t1 = _mm256_unpackhi_pd(r[0], r[1]);  // columns 1, 3
      const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]);
      const __m256d t3 = _mm256_unpackhi_pd(r[2], r[3]);
      const __m256d c[4] = {
          _mm256_permute2f128_pd(t0, t2, 0x20), _mm256_permute2f128_pd(t1, t3, 0x20),
          _mm256_permute2f128_pd(t0, t2, 0x31), _mm256_permute2f128_pd(t1, t3, 0x31)};
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_pd(reinterpret_cast<double*>(out + (4 * h + i) * value_ld + 8 * g), c[i]);
      }
    }
  }
}

inline bool any(__m256 mask) {
  return _mm256_movemask_ps(mask) != 0;
}

// MVUE n:m of 8 column groups: x[i] lane l = element i of group l (i < m), uw the groups' random
// words; out[i] as x. mvue_generic16 (mvue_avx512.cpp) with vector masks: mirrors mvue_group
// (group.cpp) operation for operation.
inline void mvue_generic8(const __m256* x, int n, int m, __m256i uw, __m256* out, __m256i& bad) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  const __m256 zero = _mm256_setzero_ps();
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 a[64];
  __m256i neg_nnz = _mm256_setzero_si256();
  for (int i = 0; i < m; ++i) {
    a[i] = _mm256_and_ps(x[i], abs_mask);
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(x[i]), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
    neg_nnz = _mm256_add_epi32(neg_nnz, _mm256_castps_si256(_mm256_cmp_ps(a[i], zero, _CMP_GT_OQ)));
  }
  // nnz <= n, i.e. -nnz > -(n + 1).
  const __m256 small =
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(neg_nnz, _mm256_set1_epi32(-(n + 1))));
  // Water-filling: lanes stay active while they cap; each pass recomputes R over the uncapped.
  __m256 cap[64];
  for (int i = 0; i < m; ++i) cap[i] = zero;
  __m256 np = _mm256_set1_ps(static_cast<float>(n));
  __m256 r_final = zero;
  __m256 active = _mm256_xor_ps(small, all);
  bool first_pass = true;
  while (any(active)) {
    __m256 r = zero;
    __m256 amax = _mm256_set1_ps(-1.0f);
    __m256 best = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int i = 0; i < m; ++i) {
      const __m256 unc = _mm256_xor_ps(cap[i], all);
      r = _mm256_blendv_ps(r, _mm256_add_ps(r, a[i]), unc);
      const __m256 gt = _mm256_and_ps(unc, _mm256_cmp_ps(a[i], amax, _CMP_GT_OQ));
      amax = _mm256_blendv_ps(amax, a[i], gt);
      best = _mm256_blendv_ps(best, _mm256_castsi256_ps(_mm256_set1_epi32(i)), gt);
    }
    r_final = _mm256_blendv_ps(r_final, r, active);
    if (first_pass) {  // R only shrinks later: overflow shows on the first pass
      const __m256 inf = _mm256_cmp_ps(r, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ);
      bad = _mm256_or_si256(bad, _mm256_castps_si256(_mm256_and_ps(inf, active)));
      first_pass = false;
    }
    const __m256 can = _mm256_and_ps(active, _mm256_cmp_ps(np, _mm256_set1_ps(2.0f), _CMP_GE_OQ));
    const __m256 caps = _mm256_and_ps(can, _mm256_cmp_ps(_mm256_mul_ps(amax, np), r, _CMP_GE_OQ));
    for (int i = 0; i < m; ++i) {
      const __m256 is_best =
          _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(best), _mm256_set1_epi32(i)));
      cap[i] = _mm256_or_ps(cap[i], _mm256_and_ps(caps, is_best));
    }
    np = _mm256_blendv_ps(np, _mm256_sub_ps(np, one), caps);
    active = caps;
  }
  const __m256 step = _mm256_div_ps(r_final, np);
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(uw, 8)),
                                 _mm256_set1_ps(1.0f / 16777216.0f));
  __m256 t = _mm256_mul_ps(u, step);
  __m256 taken = zero;  // points consumed, as floats (exact small integers)
  __m256 prefix = zero;
  for (int i = 0; i < m; ++i) {
    const __m256 unc = _mm256_andnot_ps(_mm256_or_ps(cap[i], small), all);
    const __m256 next = _mm256_add_ps(prefix, a[i]);
    __m256 kept = zero;
    for (;;) {  // while (j < n' && t < next): consume a point
      const __m256 more = _mm256_and_ps(_mm256_and_ps(unc, _mm256_cmp_ps(taken, np, _CMP_LT_OQ)),
                                        _mm256_cmp_ps(t, next, _CMP_LT_OQ));
      if (!any(more)) break;
      kept = _mm256_or_ps(kept, more);
      t = _mm256_blendv_ps(t, _mm256_add_ps(t, step), more);
      taken = _mm256_blendv_ps(taken, _mm256_add_ps(taken, one), more);
    }
    prefix = _mm256_blendv_ps(prefix, next, unc);
    const __m256 signed_step = _mm256_or_ps(_mm256_and_ps(x[i], sign_mask), step);
    __m256 o = _mm256_and_ps(kept, signed_step);
    o = _mm256_blendv_ps(o, x[i], _mm256_andnot_ps(small, cap[i]));
    const __m256 nonzero = _mm256_cmp_ps(x[i], zero, _CMP_NEQ_UQ);
    o = _mm256_blendv_ps(o, _mm256_and_ps(nonzero, x[i]), small);  // +0.0 for zeros
    out[i] = o;
  }
}

// Compressed emission of one group per lane (mvue_emit_lanes, grad/emit_lanes.h).
inline void emit_generic(const __m256* out, int n, int m, int bits, float* v, int64_t value_ld,
                         uint8_t* idx, int64_t index_ld, int64_t slot0) {
  alignas(32) float tmp[64][8];
  for (int i = 0; i < m; ++i) _mm256_store_ps(tmp[i], out[i]);
  mvue_emit_lanes(&tmp[0][0], 8, n, m, bits, v, value_ld, idx, index_ld, slot0);
}

}  // namespace

bool mvue_cols_avx2(const float* src, int64_t ld, int n, int m, int64_t group_rows, int64_t units,
                    int64_t cols, int64_t col0, const Mvue24Key& key, float* dense,
                    int64_t dense_ld, float* values, int64_t value_ld, uint8_t* indices,
                    int64_t index_ld, int bits) {
  __m256i bad = _mm256_setzero_si256();
  __m256 x[64];
  __m256 out[64];
  for (int64_t kk = 0; kk < group_rows; ++kk) {
    // One group row: its m input rows read left to right across the units (m streams).
    for (int64_t unit = 0; unit < units; ++unit) {
      __m256i uw[4];
      philox8(static_cast<uint64_t>(kk * cols + col0 + 32 * unit) >> 2, key, uw);
      for (int q = 0; q < 4; ++q) {
        const int64_t c = 32 * unit + 8 * q;
        const float* p = src + kk * m * ld + c;
        for (int i = 0; i < m; ++i) x[i] = _mm256_loadu_ps(p + i * ld);
        mvue_generic8(x, n, m, uw[q], out, bad);
        if (dense != nullptr) {
          float* d = dense + kk * m * dense_ld + c;
          for (int i = 0; i < m; ++i) _mm256_storeu_ps(d + i * dense_ld, out[i]);
        } else {
          emit_generic(out, n, m, bits, values + c * value_ld, value_ld, indices + c * index_ld,
                       index_ld, kk * n);
        }
      }
    }
  }
  return _mm256_testz_si256(bad, bad) != 0;
}

bool mvue24_cols_avx2(const float* src, int64_t ld, int64_t group_rows, int64_t units, int64_t cols,
                      int64_t col0, const Mvue24Key& key, float* dense, int64_t dense_ld,
                      float* values, int64_t value_ld, uint8_t* indices, int64_t index_ld) {
  __m256i bad = _mm256_setzero_si256();
  // The tile's kept pairs, per 8-column vector of the call, group row and column (8 bytes each),
  // and its index nibbles per vector (lane l: column l, nibble t: group row tile + t).
  alignas(32) uint64_t pairs[4 * kColsMaxUnitsAvx2][kTileRows][8];
  __m256i nibbles[4 * kColsMaxUnitsAvx2];
  for (int64_t tile = 0; tile < group_rows; tile += kTileRows) {
    const int64_t tile_rows = group_rows - tile < kTileRows ? group_rows - tile : kTileRows;
    for (int64_t v = 0; v < 4 * units; ++v) nibbles[v] = _mm256_setzero_si256();
    for (int64_t kk = tile; kk < tile + tile_rows; ++kk) {
      const __m128i shift = _mm_cvtsi32_si128(4 * static_cast<int>(kk - tile));
      for (int64_t unit = 0; unit < units; ++unit) {
        __m256i uw[4];
        philox8(static_cast<uint64_t>(kk * cols + col0 + 32 * unit) >> 2, key, uw);
        for (int q = 0; q < 4; ++q) {
          const int64_t c = 32 * unit + 8 * q;
          const float* p = src + 4 * kk * ld + c;
          const __m256 x[4] = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + ld),
                               _mm256_loadu_ps(p + 2 * ld), _mm256_loadu_ps(p + 3 * ld)};
          __m256 out[4];
          mvue8(x, uw[q], out, bad);
          if (dense != nullptr) {
            float* d = dense + 4 * kk * dense_ld + c;
            for (int i = 0; i < 4; ++i) _mm256_storeu_ps(d + i * dense_ld, out[i]);
            continue;
          }
          __m256 v0, v1;
          __m256i code;
          select24(out, v0, v1, code);
          const __m256 lo = _mm256_unpacklo_ps(v0, v1);  // pairs of columns 0, 1 | 4, 5
          const __m256 hi = _mm256_unpackhi_ps(v0, v1);  // 2, 3 | 6, 7
          auto* row = reinterpret_cast<__m256*>(pairs[4 * unit + q][kk - tile]);
          _mm256_store_ps(reinterpret_cast<float*>(row), _mm256_permute2f128_ps(lo, hi, 0x20));
          _mm256_store_ps(reinterpret_cast<float*>(row + 1), _mm256_permute2f128_ps(lo, hi, 0x31));
          nibbles[4 * unit + q] =
              _mm256_or_si256(nibbles[4 * unit + q], _mm256_sll_epi32(code, shift));
        }
      }
    }
    if (dense != nullptr) continue;
    for (int64_t v = 0; v < 4 * units; ++v) {
      alignas(32) uint32_t words[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(words), nibbles[v]);
      if (tile_rows == kTileRows) {
        store_tile_pairs(pairs[v], values + 8 * v * value_ld + 2 * tile, value_ld);
        for (int l = 0; l < 8; ++l) {
          std::memcpy(indices + (8 * v + l) * index_ld + tile / 2, &words[l], kTileRows / 2);
        }
        continue;
      }
      for (int l = 0; l < 8; ++l) {
        float* line = values + (8 * v + l) * value_ld + 2 * tile;
        for (int64_t t = 0; t < tile_rows; ++t) std::memcpy(line + 2 * t, &pairs[v][t][l], 8);
        std::memcpy(indices + (8 * v + l) * index_ld + tile / 2, &words[l],
                    static_cast<size_t>((tile_rows + 1) / 2));
      }
    }
  }
  return _mm256_testz_si256(bad, bad) != 0;
}

}  // namespace nms::detail
