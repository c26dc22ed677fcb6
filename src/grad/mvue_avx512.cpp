// AVX-512 MVUE 2:4 kernels (see mvue_avx512.h). Compiled with -mavx512f/bw/dq/vl and
// -ffp-contract=off (a contracted multiply-add would round differently from the specification);
// includes nothing that defines inline functions shared with other translation units.
#include "grad/mvue_avx512.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "grad/code24.h"
#include "grad/emit_lanes.h"

namespace nms::detail {
namespace {

// Philox4x32-10's key schedule for one key: round r uses seed + r * (0x9E3779B9, 0xBB67AE85).
struct PhiloxRounds {
  uint32_t k0[10], k1[10];
  uint32_t stream_lo, stream_hi;
};

PhiloxRounds philox_rounds(const Mvue24Key& key) {
  PhiloxRounds r{};
  for (uint32_t round = 0; round < 10; ++round) {
    r.k0[round] = key.seed_lo + round * 0x9E3779B9u;
    r.k1[round] = key.seed_hi + round * 0xBB67AE85u;
  }
  r.stream_lo = key.stream_lo;
  r.stream_hi = key.stream_hi;
  return r;
}

// Philox4x32-10 of the 16 blocks base + offset[l] (offsets in two vectors of 8 x 64 bits, lanes
// 0..7 and 8..15): w[k] lane l = word k of block l. Each counter word lives in the low half of a
// 64-bit lane, so one vpmuludq gives the whole 64-bit product (its low half is the next "lo"
// word, a shift its "hi"); the high halves carry junk that only ever reaches the ignored upper
// operand of vpmuludq and the final extraction drops it. 6 operations per round and 8 blocks
// against 9 with 32-bit lanes (products of odd lanes shifted and blended back); the round keys
// are broadcast from the precomputed schedule: the column kernel went from 172 to 165 cycles per 16
// groups in L2 and 8192 x 3072 from 21.1 to 20.4 ms (one thread, Zen 4). (Counters stored to memory
// and loaded back stalled on store forwarding: 14 % of the column kernel; they are built in
// registers.)
template <int K>
inline void philox16(const uint64_t* base, __m512i offset_lo, __m512i offset_hi,
                     const PhiloxRounds& keys, __m512i (*w)[4]) {
  constexpr int H = 2 * K;  // independent chains of 8 blocks
  __m512i c0[H], c1[H], c2[H], c3[H];
  for (int k = 0; k < K; ++k) {
    const __m512i b = _mm512_set1_epi64(static_cast<long long>(base[k]));
    c0[2 * k] = _mm512_add_epi64(b, offset_lo);
    c0[2 * k + 1] = _mm512_add_epi64(b, offset_hi);
  }
  for (int h = 0; h < H; ++h) {
    c1[h] = _mm512_srli_epi64(c0[h], 32);
    c2[h] = _mm512_set1_epi32(static_cast<int>(keys.stream_lo));
    c3[h] = _mm512_set1_epi32(static_cast<int>(keys.stream_hi));
  }
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    const __m512i k0 = _mm512_set1_epi32(static_cast<int>(keys.k0[round]));
    const __m512i k1 = _mm512_set1_epi32(static_cast<int>(keys.k1[round]));
    for (int h = 0; h < H; ++h) {
      const __m512i p0 = _mm512_mul_epu32(c0[h], mul0);
      const __m512i p1 = _mm512_mul_epu32(c2[h], mul1);
      c0[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c1[h], k0, 0x96);  // 3-way xor
      c1[h] = p1;
      c2[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p0, 32), c3[h], k1, 0x96);
      c3[h] = p0;
    }
  }
  const __m512i low_halves =
      _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int k = 0; k < K; ++k) {
    w[k][0] = _mm512_permutex2var_epi32(c0[2 * k], low_halves, c0[2 * k + 1]);
    w[k][1] = _mm512_permutex2var_epi32(c1[2 * k], low_halves, c1[2 * k + 1]);
    w[k][2] = _mm512_permutex2var_epi32(c2[2 * k], low_halves, c2[2 * k + 1]);
    w[k][3] = _mm512_permutex2var_epi32(c3[2 * k], low_halves, c3[2 * k + 1]);
  }
}

// out[s] lane 4q + k = c[k] lane 4s + q: four 16-lane "columns" into 16 rows of four, e.g. the
// Philox words of blocks 4s..4s+3 in group order, or element-major results back to groups.
inline void interleave4(const __m512i c[4], __m512i out[4]) {
  const __m512i pair_lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i pair_hi =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i p = _mm512_permutex2var_epi32(c[0], pair_lo, c[1]);
  const __m512i p2 = _mm512_permutex2var_epi32(c[0], pair_hi, c[1]);
  const __m512i q = _mm512_permutex2var_epi32(c[2], pair_lo, c[3]);
  const __m512i q2 = _mm512_permutex2var_epi32(c[2], pair_hi, c[3]);
  const __m512i quad_lo = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  const __m512i quad_hi = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  out[0] = _mm512_permutex2var_epi64(p, quad_lo, q);
  out[1] = _mm512_permutex2var_epi64(p, quad_hi, q);
  out[2] = _mm512_permutex2var_epi64(p2, quad_lo, q2);
  out[3] = _mm512_permutex2var_epi64(p2, quad_hi, q2);
}

// The inverse: z[s] holds groups 4s..4s+3 (4 floats each) -> x[i] lane l = element i of group l.
inline void deinterleave4(const __m512 z[4], __m512 x[4]) {
  const __m512i e01 = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
  const __m512i e23 = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
  const __m512 a01 = _mm512_permutex2var_ps(z[0], e01, z[1]);  // e0 of g0..7 | e1 of g0..7
  const __m512 a23 = _mm512_permutex2var_ps(z[0], e23, z[1]);
  const __m512 b01 = _mm512_permutex2var_ps(z[2], e01, z[3]);  // the same for g8..15
  const __m512 b23 = _mm512_permutex2var_ps(z[2], e23, z[3]);
  x[0] = _mm512_shuffle_f32x4(a01, b01, 0x44);
  x[1] = _mm512_shuffle_f32x4(a01, b01, 0xEE);
  x[2] = _mm512_shuffle_f32x4(a23, b23, 0x44);
  x[3] = _mm512_shuffle_f32x4(a23, b23, 0xEE);
}

// MVUE 2:4 of 16 groups (x[i] lane l = element i of group l; uw their random words): the
// operations of mvue_group (group.cpp), as the SSE2 kernel in prune.cpp performs them. kept[i]:
// the lanes whose out[i] != 0 (what the compressed form keeps). `worst` accumulates the largest
// bit pattern of |x| and of the magnitude sums of groups that are sampled: one vpmaxud per vector
// (finite_so_far tests it) instead of an exponent mask, a comparison and a mask OR.
//
// Selection by the systematic sample's two points t0 <= t1: element i is hit when a point lies in
// [prefix[i], prefix[i+1]), i.e. (t < prefix[i+1]) && !(t < prefix[i]) with t < prefix[0] = 0
// never true; 8 comparisons instead of 16 (the same answer for every input without NaN, and the
// others are reported through `worst`). kept[] comes from the selection instead of 4 comparisons of
// out[] against 0. Both, with select24's masked moves, took the column kernel from 183 to 172
// cycles per 16 groups in L2 (1024 x 512, one thread, Zen 4) and 8192 x 3072 from 22.6 to 21.1 ms.
template <int K>
inline void mvue16(const __m512 (*x)[4], const __m512i* uw, __m512 (*out)[4], __mmask16 (*kept)[4],
                   __m512i& worst) {
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 zero = _mm512_setzero_ps();
  __m512 a[K][4];
  __mmask16 nz[K][4];
  __mmask16 three[K], small[K], case_c[K];
  __m512 s[K];
  for (int k = 0; k < K; ++k) {
    for (int i = 0; i < 4; ++i) {
      a[k][i] = _mm512_abs_ps(x[k][i]);
      worst = _mm512_max_epu32(worst, _mm512_castps_si512(a[k][i]));
      nz[k][i] = _mm512_cmp_ps_mask(a[k][i], zero, _CMP_GT_OQ);
    }
  }
  for (int k = 0; k < K; ++k) {
    // At least three nonzeros: not "small" (small groups are kept as they are).
    three[k] = static_cast<__mmask16>((nz[k][0] & nz[k][1] & (nz[k][2] | nz[k][3])) |
                                      (nz[k][2] & nz[k][3] & (nz[k][0] | nz[k][1])));
    small[k] = static_cast<__mmask16>(~three[k]);
    s[k] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[k][0], a[k][1]), a[k][2]), a[k][3]);
  }
  __m512 amax[K];
  for (int k = 0; k < K; ++k) {
    worst = _mm512_mask_max_epu32(worst, three[k], worst, _mm512_castps_si512(s[k]));  // +Inf
    amax[k] = _mm512_max_ps(_mm512_max_ps(a[k][0], a[k][1]), _mm512_max_ps(a[k][2], a[k][3]));
    case_c[k] = _mm512_cmp_ps_mask(_mm512_mul_ps(amax[k], _mm512_set1_ps(2.0f)), s[k], _CMP_GE_OQ);
  }
  __mmask16 seen[K];
  __mmask16 cap[K][4];
  __m512 prefix[K][5];
  for (int k = 0; k < K; ++k) {
    seen[k] = 0;
    prefix[k][0] = zero;
  }
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < K; ++k) {
      const auto is_max =
          static_cast<__mmask16>(_mm512_cmp_ps_mask(a[k][i], amax[k], _CMP_EQ_OQ) & ~seen[k]);
      seen[k] = static_cast<__mmask16>(seen[k] | is_max);
      cap[k][i] = static_cast<__mmask16>(case_c[k] & is_max);
      const __m512 ap = _mm512_maskz_mov_ps(static_cast<__mmask16>(~cap[k][i]), a[k][i]);
      prefix[k][i + 1] = _mm512_add_ps(prefix[k][i], ap);
    }
  }
  __m512 step[K], t0[K], t1[K];
  for (int k = 0; k < K; ++k) {
    const __m512 total = prefix[k][4];
    step[k] = _mm512_mask_mov_ps(_mm512_mul_ps(total, _mm512_set1_ps(0.5f)), case_c[k], total);
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(uw[k], 8)),
                                   _mm512_set1_ps(1.0f / 16777216.0f));
    t0[k] = _mm512_mul_ps(u, step[k]);
    t1[k] = _mm512_add_ps(t0[k], step[k]);
  }
  __mmask16 below0_prev[K], below1_prev[K];
  for (int k = 0; k < K; ++k) below0_prev[k] = below1_prev[k] = 0;
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < K; ++k) {
      const __mmask16 below0 = _mm512_cmp_ps_mask(t0[k], prefix[k][i + 1], _CMP_LT_OQ);
      const __mmask16 below1 = _mm512_cmp_ps_mask(t1[k], prefix[k][i + 1], _CMP_LT_OQ);
      const auto hit =
          static_cast<__mmask16>((below0 & ~below0_prev[k]) | (below1 & ~below1_prev[k]));
      below0_prev[k] = below0;
      below1_prev[k] = below1;
      const auto sel =
          static_cast<__mmask16>((small[k] & nz[k][i]) | (three[k] & (cap[k][i] | hit)));
      const auto as_is = static_cast<__mmask16>(cap[k][i] | small[k]);
      const __m512 signed_step = _mm512_or_ps(_mm512_and_ps(x[k][i], sign_mask), step[k]);
      const __m512 val = _mm512_mask_mov_ps(signed_step, as_is, x[k][i]);
      out[k][i] = _mm512_maskz_mov_ps(sel, val);
      kept[k][i] = sel;
    }
  }
}

// The random words of 4 group rows for `blocks` 16-column blocks: uw[blk][j] lane l = the word of
// group id first + j · cols + 16 · blk + l (block_lo / block_hi: the Philox block offsets of one
// block's 4 rows, as the column kernels set them up). Two blocks' Philox at a time: four
// independent multiply chains instead of two (in L2: 151 -> 144 cycles per 16 groups; 8192 x
// 3072: 19.2 -> 18.3 ms).
inline void draw_words(int64_t first, int64_t blocks, __m512i block_lo, __m512i block_hi,
                       const PhiloxRounds& rounds, __m512i (*uw)[4]) {
  const auto draw = [&](auto k_blocks, int64_t blk0) {
    constexpr int K = decltype(k_blocks)::value;
    uint64_t base[K];
    for (int k = 0; k < K; ++k) base[k] = static_cast<uint64_t>(first + 16 * (blk0 + k)) >> 2;
    __m512i w[K][4];
    philox16<K>(base, block_lo, block_hi, rounds, w);
    for (int k = 0; k < K; ++k) interleave4(w[k], uw[blk0 + k]);
  };
  int64_t next = 0;
  for (; next + 2 <= blocks; next += 2) draw(std::integral_constant<int, 2>(), next);
  if (next < blocks) draw(std::integral_constant<int, 1>(), next);
}

// MVUE of K blocks' 16 groups of group row kk (x[k][i] lane l = element i of the group in column
// 16 · (blk0 + k) + l; uw[blk][j] their words): out / kept as mvue16's, the next group row's lines
// prefetched.
template <int K>
inline void prune_blocks(const float* src, int64_t ld, int64_t kk, int64_t group_rows, int64_t blk0,
                         int j, const __m512i (*uw)[4], __m512 (*out)[4], __mmask16 (*kept)[4],
                         __m512i& worst) {
  __m512 x[K][4];
  __m512i words[K];
  for (int k = 0; k < K; ++k) {
    const float* p = src + 4 * kk * ld + 16 * (blk0 + k);
    if (kk + 1 < group_rows) {  // the next group row, one pass over the blocks ahead
      for (int i = 4; i < 8; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(p + i * ld), _MM_HINT_T0);
    }
    for (int i = 0; i < 4; ++i) x[k][i] = _mm512_loadu_ps(p + i * ld);
    words[k] = uw[blk0 + k][j];
  }
  mvue16<K>(x, words, out, kept, worst);
}

// No NaN, Inf or overflowing sum among what mvue16 folded into `worst`.
inline bool finite_so_far(__m512i worst) {
  return _mm512_cmpge_epu32_mask(worst, _mm512_set1_epi32(0x7f800000)) == 0;
}

// The two kept values (v0 the lower position) and the canonical index code of 16 results, from
// the kept masks (at most two per lane: MVUE places two points, and a capped element leaves one).
// Slots follow kCode24: v1 is the highest kept element when it is at position 2 or 3, else
// element 1; v0 is the lower of two kept elements, else element 0 (padding: +0.0 there, as an
// unkept element of out is).
inline void select24(const __m512 out[4], const __mmask16 kept[4], __m512& v0, __m512& v1,
                     __m512i& code) {
  __m512i nib = _mm512_maskz_mov_epi32(kept[0], _mm512_set1_epi32(1));
  nib = _mm512_mask_or_epi32(nib, kept[1], nib, _mm512_set1_epi32(2));
  nib = _mm512_mask_or_epi32(nib, kept[2], nib, _mm512_set1_epi32(4));
  nib = _mm512_mask_or_epi32(nib, kept[3], nib, _mm512_set1_epi32(8));
  alignas(64) static constexpr uint32_t kTable[16] = {
      kCode24[0],  kCode24[1],  kCode24[2],  kCode24[3], kCode24[4],  kCode24[5],
      kCode24[6],  kCode24[7],  kCode24[8],  kCode24[9], kCode24[10], kCode24[11],
      kCode24[12], kCode24[13], kCode24[14], kCode24[15]};
  code = _mm512_permutexvar_epi32(nib, _mm512_load_si512(kTable));
  v1 = _mm512_mask_mov_ps(out[1], kept[2], out[2]);
  v1 = _mm512_mask_mov_ps(v1, kept[3], out[3]);
  v0 = _mm512_mask_mov_ps(out[0], static_cast<__mmask16>(kept[1] & (kept[2] | kept[3])), out[1]);
  v0 = _mm512_mask_mov_ps(v0, static_cast<__mmask16>(kept[2] & kept[3]), out[2]);
}

// Pairs (v0[l], v1[l]) in lane order: lanes 0..7 in *lo, 8..15 in *hi.
inline void interleave_pairs(__m512 v0, __m512 v1, __m512& lo, __m512& hi) {
  lo = _mm512_permutex2var_ps(
      v0, _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0), v1);
  hi = _mm512_permutex2var_ps(
      v0, _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8), v1);
}

// 8 x 8 transpose of 64-bit elements: t[c] element k = r[k] element c.
inline void transpose8x8_epi64(const __m512i r[8], __m512i t[8]) {
  __m512i a[8];
  for (int k = 0; k < 8; k += 2) {
    a[k] = _mm512_unpacklo_epi64(r[k], r[k + 1]);      // 128-bit lane L: columns 2L of k, k+1
    a[k + 1] = _mm512_unpackhi_epi64(r[k], r[k + 1]);  // columns 2L + 1
  }
  __m512i b[8];
  for (int h = 0; h < 2; ++h) {                                 // h: even / odd columns
    for (int q = 0; q < 2; ++q) {                               // q: rows 0..3 / 4..7
      const __m512i x = a[4 * q + h];                           // rows 4q, 4q + 1
      const __m512i y = a[4 * q + 2 + h];                       // rows 4q + 2, 4q + 3
      b[4 * h + 2 * q] = _mm512_shuffle_i64x2(x, y, 0x88);      // columns 0 / 4 (+h)
      b[4 * h + 2 * q + 1] = _mm512_shuffle_i64x2(x, y, 0xDD);  // columns 2 / 6 (+h)
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int e = 0; e < 2; ++e) {          // e: columns {0, 4} / {2, 6} (+h)
      const __m512i x = b[4 * h + e];      // rows 0..3
      const __m512i y = b[4 * h + 2 + e];  // rows 4..7
      t[2 * e + h] = _mm512_shuffle_i64x2(x, y, 0x88);
      t[2 * e + h + 4] = _mm512_shuffle_i64x2(x, y, 0xDD);
    }
  }
}

}  // namespace

bool mvue24_rows_avx512(const float* src, int64_t groups, uint64_t gid0, const Mvue24Key& key,
                        float* dense, float* values, uint8_t* indices) {
  __m512i worst = _mm512_setzero_si512();
  const PhiloxRounds rounds = philox_rounds(key);
  const __m512i offset_lo = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i offset_hi = _mm512_set_epi64(15, 14, 13, 12, 11, 10, 9, 8);
  for (int64_t base = 0; base < groups; base += 64) {
    __m512i w[1][4];
    __m512i uw[4];
    const uint64_t block = (gid0 + static_cast<uint64_t>(base)) >> 2;
    philox16<1>(&block, offset_lo, offset_hi, rounds, w);
    interleave4(w[0], uw);
    const int64_t left = (groups - base) / 16;
    const int batches = left < 4 ? static_cast<int>(left) : 4;
    for (int s = 0; s < batches; ++s) {
      const int64_t g = base + 16 * s;
      const float* p = src + 4 * g;
      const __m512 z[4] = {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16), _mm512_loadu_ps(p + 32),
                           _mm512_loadu_ps(p + 48)};
      __m512 x[4];
      deinterleave4(z, x);
      __m512 outs[1][4];
      __mmask16 kepts[1][4];
      mvue16<1>(&x, &uw[s], outs, kepts, worst);
      const __m512* out = outs[0];
      if (dense != nullptr) {
        const __m512i o[4] = {_mm512_castps_si512(out[0]), _mm512_castps_si512(out[1]),
                              _mm512_castps_si512(out[2]), _mm512_castps_si512(out[3])};
        __m512i r[4];
        interleave4(o, r);
        for (int k = 0; k < 4; ++k) _mm512_storeu_si512(dense + 4 * g + 16 * k, r[k]);
      } else {
        __m512 v0, v1, pairs_lo, pairs_hi;
        __m512i code;
        select24(out, kepts[0], v0, v1, code);
        interleave_pairs(v0, v1, pairs_lo, pairs_hi);
        _mm512_storeu_ps(values + 2 * g, pairs_lo);
        _mm512_storeu_ps(values + 2 * g + 16, pairs_hi);
        // Lane pairs (2b, 2b + 1) -> byte b = code[2b] | code[2b + 1] << 4.
        const __m512i bytes = _mm512_or_si512(code, _mm512_srli_epi64(code, 28));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(indices + g / 2), _mm512_cvtepi64_epi8(bytes));
      }
    }
  }
  return finite_so_far(worst);
}

bool mvue24_cols_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                        int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                        float* dense, int64_t dense_ld, float* values, int64_t value_ld,
                        uint8_t* indices, int64_t index_ld) {
  __m512i worst = _mm512_setzero_si512();
  const PhiloxRounds rounds = philox_rounds(key);
  // Philox lane 4j + q: the block of group row kk0 + j, columns 4q .. 4q + 3 of the 16.
  const auto quarter = static_cast<long long>(cols / 4);
  const __m512i block_lo =
      _mm512_set_epi64(quarter + 3, quarter + 2, quarter + 1, quarter, 3, 2, 1, 0);
  const __m512i block_hi = _mm512_add_epi64(block_lo, _mm512_set1_epi64(2 * quarter));
  // Byte offsets of 16 columns' index rows.
  const __m512i lanes_lo = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lanes_hi = _mm512_set_epi64(15, 14, 13, 12, 11, 10, 9, 8);
  const __m512i index_bytes = _mm512_set1_epi64(index_ld);
  const __m512i ioff_lo = _mm512_mullo_epi64(lanes_lo, index_bytes);
  const __m512i ioff_hi = _mm512_mullo_epi64(lanes_hi, index_bytes);
  // Tiles of 8 group rows (32 input rows) x all the columns, each input row read left to right:
  // the hardware prefetcher follows 4 rows at a time, and each column's output gets 64 contiguous
  // bytes of values and 4 bytes of indices per tile. (Walking down a 16-column block instead, 32
  // rows of 64 bytes at a time, ran at 0.96 GB/s, latency-bound.)
  __m512i uw[kColsMaxBlocks][4];        // random words of the current 4 group rows, per block
  __m512i nibbles[kColsMaxBlocks];      // index nibbles of the current tile, per block
  __m512i pairs[kColsMaxBlocks][2][8];  // kept pairs of the tile: columns 0..7 / 8..15, group row
  for (int64_t tile = 0; tile < group_rows; tile += 8) {
    const int64_t tile_rows = group_rows - tile < 8 ? group_rows - tile : 8;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      nibbles[blk] = _mm512_setzero_si512();
      for (int64_t t = tile_rows; t < 8; ++t) {
        pairs[blk][0][t] = _mm512_setzero_si512();
        pairs[blk][1][t] = _mm512_setzero_si512();
      }
    }
    for (int64_t kk0 = tile; kk0 < tile + tile_rows; kk0 += 4) {
      draw_words((row0 + kk0) * cols + col0, blocks, block_lo, block_hi, rounds, uw);
      const int64_t left = tile + tile_rows - kk0;
      const int batches = left < 4 ? static_cast<int>(left) : 4;
      for (int j = 0; j < batches; ++j) {
        const int64_t kk = kk0 + j;
        const __m128i shift = _mm_cvtsi32_si128(4 * static_cast<int>(kk - tile));
        // Two blocks at a time, their dependency chains interleaved: one 16-group chain is
        // latency-bound (in L2, 1024 x 512: 162 -> 151 cycles per 16 groups; four at a time
        // spill registers and took 170).
        const auto run = [&](auto k_blocks, int64_t blk0) {
          constexpr int K = decltype(k_blocks)::value;
          __m512 out[K][4];
          __mmask16 kept[K][4];
          prune_blocks<K>(src, ld, kk, group_rows, blk0, j, uw, out, kept, worst);
          for (int k = 0; k < K; ++k) {
            const int64_t blk = blk0 + k;
            const int64_t c = 16 * blk;
            if (dense != nullptr) {
              float* d = dense + 4 * kk * dense_ld + c;
              for (int i = 0; i < 4; ++i) _mm512_storeu_ps(d + i * dense_ld, out[k][i]);
              continue;
            }
            __m512 v0, v1, pairs_lo, pairs_hi;
            __m512i code;
            select24(out[k], kept[k], v0, v1, code);
            interleave_pairs(v0, v1, pairs_lo, pairs_hi);
            pairs[blk][0][kk - tile] = _mm512_castps_si512(pairs_lo);
            pairs[blk][1][kk - tile] = _mm512_castps_si512(pairs_hi);
            nibbles[blk] = _mm512_or_si512(nibbles[blk], _mm512_sll_epi32(code, shift));
          }
        };
        int64_t pair = 0;
        for (; pair + 2 <= blocks; pair += 2) run(std::integral_constant<int, 2>(), pair);
        if (pair < blocks) run(std::integral_constant<int, 1>(), pair);
      }
    }
    if (dense != nullptr) continue;
    // Each column's 2 x tile_rows values: one 64-byte row segment (8 x 8 transposes of pairs),
    // written around the cache when it is a whole line: 512 columns' lines per tile, each read
    // for ownership from memory first with plain stores (1.2 GB/s; streaming: see prune.cpp).
    const auto value_mask = static_cast<__mmask16>((1u << (2 * tile_rows)) - 1);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      for (int h = 0; h < 2; ++h) {
        __m512i t[8];
        transpose8x8_epi64(pairs[blk][h], t);
        float* v = values + (16 * blk + 8 * h) * value_ld + 2 * tile;
        for (int c = 0; c < 8; ++c) {
          float* line = v + c * value_ld;
          if (tile_rows == 8 && (reinterpret_cast<uintptr_t>(line) & 63) == 0) {
            _mm512_stream_ps(line, _mm512_castsi512_ps(t[c]));
          } else {
            _mm512_mask_storeu_ps(line, value_mask, _mm512_castsi512_ps(t[c]));
          }
        }
      }
      uint8_t* dst = indices + 16 * blk * index_ld + tile / 2;
      if (tile_rows == 8) {  // 4 full index bytes per column
        _mm512_i64scatter_epi32(dst, ioff_lo, _mm512_castsi512_si256(nibbles[blk]), 1);
        _mm512_i64scatter_epi32(dst, ioff_hi, _mm512_extracti64x4_epi64(nibbles[blk], 1), 1);
      } else {  // the last (tile_rows + 1) / 2 bytes of each index row
        alignas(64) uint32_t words[16];
        _mm512_store_si512(words, nibbles[blk]);
        for (int l = 0; l < 16; ++l) {
          for (int64_t b = 0; b < (tile_rows + 1) / 2; ++b) {
            dst[l * index_ld + b] = static_cast<uint8_t>(words[l] >> (8 * b));
          }
        }
      }
    }
  }
  _mm_sfence();  // streaming stores ordered before the caller's synchronisation
  return finite_so_far(worst);
}

namespace {

// The groups of mvue24_lanes_avx512 / mvue24_pairs_bf16_avx512 in 16-token chunks: per chunk
// (four group rows), per group row j of it and 16-column block, emit(c, chunk, j, v0, v1, code)
// with c the block's first column, v0 / v1 its groups' two kept values and code their canonical
// index codes (select24). Returns false as mvue24_cols_avx512 does.
template <class Emit>
bool mvue24_chunks_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                          int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                          Emit&& emit) {
  __m512i worst = _mm512_setzero_si512();
  const PhiloxRounds rounds = philox_rounds(key);
  const auto quarter = static_cast<long long>(cols / 4);
  const __m512i block_lo =
      _mm512_set_epi64(quarter + 3, quarter + 2, quarter + 1, quarter, 3, 2, 1, 0);
  const __m512i block_hi = _mm512_add_epi64(block_lo, _mm512_set1_epi64(2 * quarter));
  __m512i uw[kColsMaxBlocks][4];
  // Group rows in fours (one 16-token chunk), each input row read left to right across the
  // blocks, as in mvue24_cols_avx512; each result goes straight to its place (no transposes).
  for (int64_t kk0 = 0; kk0 < group_rows; kk0 += 4) {
    draw_words((row0 + kk0) * cols + col0, blocks, block_lo, block_hi, rounds, uw);
    const int64_t chunk = (row0 + kk0) / 4;
    for (int j = 0; j < 4; ++j) {
      const int64_t kk = kk0 + j;
      const auto run = [&](auto k_blocks, int64_t blk0) {
        constexpr int K = decltype(k_blocks)::value;
        __m512 out[K][4];
        __mmask16 kept[K][4];
        prune_blocks<K>(src, ld, kk, group_rows, blk0, j, uw, out, kept, worst);
        for (int k = 0; k < K; ++k) {
          __m512 v0, v1;
          __m512i code;
          select24(out[k], kept[k], v0, v1, code);
          emit(col0 + 16 * (blk0 + k), chunk, j, v0, v1, code);
        }
      };
      int64_t pair = 0;
      for (; pair + 2 <= blocks; pair += 2) run(std::integral_constant<int, 2>(), pair);
      if (pair < blocks) run(std::integral_constant<int, 1>(), pair);
    }
  }
  _mm_sfence();  // streaming stores ordered before the caller's synchronisation
  return finite_so_far(worst);
}

// vcvtneps2bf16's result for finite v, in the low 16 bits of each lane: round to nearest even
// on the bit pattern, a denormal input read as signed zero (nm_gemm_bf16_scalar.h's
// round_operand_bf16). Integer operations: this unit is built without AVX512_BF16.
inline __m512i bf16_bits(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(b, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 denormal = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_and_epi32(rounded, denormal, high, _mm512_set1_epi32(0x8000));
}

}  // namespace

bool mvue24_lanes_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                         int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                         int64_t chunks, float* values, int32_t* lanes) {
  const __m512i two_bits = _mm512_set1_epi32(3);
  return mvue24_chunks_avx512(
      src, ld, group_rows, blocks, cols, row0, col0, key,
      [&](int64_t c, int64_t chunk, int j, __m512 v0, __m512 v1, __m512i code) {
        // Slots 2j and 2j + 1 of the chunk: 64-byte rows of 16 lanes (half c % 32 / 16).
        const int64_t at = (((c / 32) * chunks + chunk) * 8 + 2 * j) * 32 + (c % 32);
        const __m512i lane_base = _mm512_set1_epi32(4 * j);
        const __m512i lane0 = _mm512_add_epi32(lane_base, _mm512_and_si512(code, two_bits));
        const __m512i lane1 = _mm512_add_epi32(lane_base, _mm512_srli_epi32(code, 2));
        _mm512_stream_ps(values + at, v0);
        _mm512_stream_ps(values + at + 32, v1);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(lanes + at), lane0);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(lanes + at + 32), lane1);
      });
}

bool mvue24_pairs_bf16_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                              int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                              int64_t chunks32, uint16_t* values, uint16_t* index) {
  const __m512i two_bits = _mm512_set1_epi32(3);
  return mvue24_chunks_avx512(
      src, ld, group_rows, blocks, cols, row0, col0, key,
      [&](int64_t c, int64_t chunk, int j, __m512 v0, __m512 v1, __m512i code) {
        // Group j of 16-token chunk `chunk` is pair (chunk % 2) · 4 + j of 32-token chunk
        // chunk / 2; its 16 lanes are half c % 32 / 16 of row block c / 32.
        const int64_t pair = chunk % 2 * 4 + j;
        const int64_t at = (((c / 32) * chunks32 + chunk / 2) * 8 + pair) * 64 + 2 * (c % 32);
        const __m512i base = _mm512_set1_epi32(static_cast<int>(chunk % 2 * 16 + 4 * j));
        const __m512i col0_of = _mm512_add_epi32(base, _mm512_and_si512(code, two_bits));
        const __m512i col1_of = _mm512_add_epi32(base, _mm512_srli_epi32(code, 2));
        const __m512i words = _mm512_or_si512(bf16_bits(v0), _mm512_slli_epi32(bf16_bits(v1), 16));
        const __m512i columns = _mm512_or_si512(col0_of, _mm512_slli_epi32(col1_of, 16));
        _mm512_stream_si512(reinterpret_cast<__m512i*>(values + at), words);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(index + at), columns);
      });
}

namespace {

// MVUE n:m of 16 column groups: x[i] lane l = element i of group l (i < m), uw the groups' random
// words; out[i] as x. Mirrors mvue_group (group.cpp) operation for operation.
template <int M>
inline void mvue_generic16(const __m512* x, int n, int m, __m512i uw, __m512* out, __mmask16& bad) {
  if constexpr (M > 0) m = M;
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 zero = _mm512_setzero_ps();
  __m512 a[64];
  __m512i nnz = _mm512_setzero_si512();
  for (int i = 0; i < m; ++i) {
    a[i] = _mm512_abs_ps(x[i]);
    const __m512i e = _mm512_and_si512(_mm512_castps_si512(x[i]), exp_mask);
    bad = static_cast<__mmask16>(bad | _mm512_cmpeq_epi32_mask(e, exp_mask));
    nnz = _mm512_mask_add_epi32(nnz, _mm512_cmp_ps_mask(a[i], zero, _CMP_GT_OQ), nnz,
                                _mm512_set1_epi32(1));
  }
  const __mmask16 small = _mm512_cmple_epi32_mask(nnz, _mm512_set1_epi32(n));
  // Water-filling: lanes stay active while they cap; each pass recomputes R over the uncapped.
  __mmask16 cap[64];
  for (int i = 0; i < m; ++i) cap[i] = 0;
  __m512 np = _mm512_set1_ps(static_cast<float>(n));
  __m512 r_final = zero;
  auto active = static_cast<__mmask16>(~small);
  bool first_pass = true;
  while (active != 0) {
    __m512 r = zero;
    __m512 amax = _mm512_set1_ps(-1.0f);
    __m512i best = _mm512_set1_epi32(-1);
    for (int i = 0; i < m; ++i) {
      const auto unc = static_cast<__mmask16>(~cap[i]);
      r = _mm512_mask_add_ps(r, unc, r, a[i]);
      const __mmask16 gt = _mm512_mask_cmp_ps_mask(unc, a[i], amax, _CMP_GT_OQ);
      amax = _mm512_mask_mov_ps(amax, gt, a[i]);
      best = _mm512_mask_mov_epi32(best, gt, _mm512_set1_epi32(i));
    }
    r_final = _mm512_mask_mov_ps(r_final, active, r);
    if (first_pass) {  // R only shrinks later: overflow shows on the first pass
      const __mmask16 inf = _mm512_cmp_ps_mask(r, _mm512_set1_ps(__builtin_inff()), _CMP_EQ_OQ);
      bad = static_cast<__mmask16>(bad | (inf & active));
      first_pass = false;
    }
    const __mmask16 can = _mm512_mask_cmp_ps_mask(active, np, _mm512_set1_ps(2.0f), _CMP_GE_OQ);
    const __mmask16 caps = _mm512_mask_cmp_ps_mask(can, _mm512_mul_ps(amax, np), r, _CMP_GE_OQ);
    for (int i = 0; i < m; ++i) {
      cap[i] = static_cast<__mmask16>(cap[i] |
                                      (caps & _mm512_cmpeq_epi32_mask(best, _mm512_set1_epi32(i))));
    }
    np = _mm512_mask_sub_ps(np, caps, np, _mm512_set1_ps(1.0f));
    active = caps;
  }
  const __m512 step = _mm512_div_ps(r_final, np);
  const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(uw, 8)),
                                 _mm512_set1_ps(1.0f / 16777216.0f));
  __m512 t = _mm512_mul_ps(u, step);
  __m512 taken = zero;  // points consumed, as floats (exact small integers)
  __m512 prefix = zero;
  for (int i = 0; i < m; ++i) {
    const auto unc = static_cast<__mmask16>(~cap[i] & ~small);
    const __m512 next = _mm512_add_ps(prefix, a[i]);
    __mmask16 kept = 0;
    for (;;) {  // while (j < n' && t < next): consume a point
      const __mmask16 more = _mm512_mask_cmp_ps_mask(
          _mm512_mask_cmp_ps_mask(unc, taken, np, _CMP_LT_OQ), t, next, _CMP_LT_OQ);
      if (more == 0) break;
      kept = static_cast<__mmask16>(kept | more);
      t = _mm512_mask_add_ps(t, more, t, step);
      taken = _mm512_mask_add_ps(taken, more, taken, _mm512_set1_ps(1.0f));
    }
    prefix = _mm512_mask_mov_ps(prefix, unc, next);
    const __m512 signed_step = _mm512_or_ps(_mm512_and_ps(x[i], sign_mask), step);
    __m512 o = _mm512_maskz_mov_ps(kept, signed_step);
    o = _mm512_mask_mov_ps(o, static_cast<__mmask16>(cap[i] & ~small), x[i]);
    const __mmask16 nonzero = _mm512_cmp_ps_mask(x[i], zero, _CMP_NEQ_UQ);
    o = _mm512_mask_mov_ps(o, small, _mm512_maskz_mov_ps(nonzero, x[i]));  // +0.0 for zeros
    out[i] = o;
  }
}

// t[c] lane r = x[r] lane c.
inline void transpose16x16_ps(const __m512 x[16], __m512 t[16]) {
  __m512 a[16];
  for (int k = 0; k < 16; k += 2) {
    a[k] = _mm512_unpacklo_ps(x[k], x[k + 1]);
    a[k + 1] = _mm512_unpackhi_ps(x[k], x[k + 1]);
  }
  __m512 b[16];  // b[4k + j], 128-bit lane L: column 4L + j of rows 4k .. 4k + 3
  for (int k = 0; k < 16; k += 4) {
    const __m512d a0 = _mm512_castps_pd(a[k]);
    const __m512d a1 = _mm512_castps_pd(a[k + 1]);
    const __m512d a2 = _mm512_castps_pd(a[k + 2]);
    const __m512d a3 = _mm512_castps_pd(a[k + 3]);
    b[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    b[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    b[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    b[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 u = _mm512_shuffle_f32x4(b[j], b[4 + j], 0x44);
    const __m512 w = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0x44);
    const __m512 u2 = _mm512_shuffle_f32x4(b[j], b[4 + j], 0xEE);
    const __m512 w2 = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0xEE);
    t[j] = _mm512_shuffle_f32x4(u, w, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(u, w, 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(u2, w2, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(u2, w2, 0xDD);
  }
}

// The index fields of every position of a group, for pext: chunk c holds positions
// [c · per_chunk, (c + 1) · per_chunk) as consecutive fields of `bits` bits.
struct IndexChunks {
  int per_chunk = 0;
  int chunks = 0;
  uint64_t spread = 0;  // bit j · bits set for each j < per_chunk
  uint64_t iota[8] = {};
};

IndexChunks index_chunks(int m, int bits) {
  IndexChunks ic;
  ic.per_chunk = 64 / bits;
  ic.chunks = (m + ic.per_chunk - 1) / ic.per_chunk;
  for (int j = 0; j < ic.per_chunk; ++j) ic.spread |= uint64_t{1} << (j * bits);
  for (int c = 0; c < ic.chunks; ++c) {
    for (int j = 0; j < ic.per_chunk && c * ic.per_chunk + j < m; ++j) {
      ic.iota[c] |= static_cast<uint64_t>(c * ic.per_chunk + j) << (j * bits);
    }
  }
  return ic;
}

// mvue_emit_lanes (grad/emit_lanes.h) for 16 groups of m <= 32 with n · bits <= 120, the same
// bytes. Kept masks per lane from the results (nonzero, then the lowest free positions up to n);
// the groups transposed into registers (16 x 16 blocks) and their values compressed and stored
// with one or two masked stores; the index fields picked from a table of all positions by pext
// with the kept mask spread over the fields (pdep), and OR-ed into the row once. MVUE 4:8 / 16:32
// of dY 8192 x 3072 along tokens, compressed, one thread, Zen 4: 93 / 108 ms with the scalar
// emission, 72 / 86 ms with this one (42 / 53 ms with dense output).
template <int M>
inline void emit_vector(const __m512* out, int n, int m, int bits, const IndexChunks& ic, float* v,
                        int64_t value_ld, uint8_t* idx, int64_t index_ld, int64_t slot0) {
  if constexpr (M > 0) m = M;
  const __m512 zero = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi32(1);
  __m512i kept = _mm512_setzero_si512();
  __m512i count = _mm512_setzero_si512();
  for (int i = 0; i < m; ++i) {
    const __mmask16 nz = _mm512_cmp_ps_mask(out[i], zero, _CMP_NEQ_UQ);  // `!= 0.0f`
    kept = _mm512_mask_or_epi32(kept, nz, kept, _mm512_set1_epi32(static_cast<int>(1u << i)));
    count = _mm512_mask_add_epi32(count, nz, count, one);
  }
  const __m512i nv = _mm512_set1_epi32(n);
  for (__mmask16 need = _mm512_cmplt_epi32_mask(count, nv); need != 0;
       need = _mm512_cmplt_epi32_mask(count, nv)) {  // the lowest free position, lane by lane
    const __m512i low_free = _mm512_andnot_si512(kept, _mm512_add_epi32(kept, one));
    kept = _mm512_mask_or_epi32(kept, need, kept, low_free);
    count = _mm512_mask_add_epi32(count, need, count, one);
  }
  alignas(64) uint32_t masks[16];
  _mm512_store_si512(masks, kept);
  __m512 rows[16];
  __m512 lo[16];
  __m512 hi[16];
  for (int i = 0; i < 16; ++i) rows[i] = i < m ? out[i] : zero;
  transpose16x16_ps(rows, lo);
  if (m > 16) {
    for (int i = 0; i < 16; ++i) rows[i] = 16 + i < m ? out[16 + i] : zero;
    transpose16x16_ps(rows, hi);
  }
  const uint64_t fill = (uint64_t{1} << bits) - 1;
  const uint64_t chunk_mask = ic.per_chunk >= 64 ? ~uint64_t{0} : (uint64_t{1} << ic.per_chunk) - 1;
  const int64_t bit = slot0 * bits;
  const int shift = static_cast<int>(bit & 7);
  const int bytes = (shift + n * bits + 7) / 8;
  for (int l = 0; l < 16; ++l) {
    const uint32_t k = masks[l];
    float* vals = v + l * value_ld + slot0;
    const auto k_lo = static_cast<__mmask16>(k);
    const int c_lo = __builtin_popcount(k & 0xFFFFu);
    _mm512_mask_storeu_ps(vals, static_cast<__mmask16>((1u << c_lo) - 1),
                          _mm512_maskz_compress_ps(k_lo, lo[l]));
    if (m > 16) {
      _mm512_mask_storeu_ps(vals + c_lo, static_cast<__mmask16>((1u << (n - c_lo)) - 1),
                            _mm512_maskz_compress_ps(static_cast<__mmask16>(k >> 16), hi[l]));
    }
    IndexWord word = 0;
    int at = 0;
    for (int c = 0; c < ic.chunks; ++c) {
      const uint64_t kc = (static_cast<uint64_t>(k) >> (c * ic.per_chunk)) & chunk_mask;
      const uint64_t fields = _pdep_u64(kc, ic.spread) * fill;
      word |= static_cast<IndexWord>(_pext_u64(ic.iota[c], fields)) << (at * bits);
      at += __builtin_popcountll(kc);
    }
    word <<= shift;
    uint8_t* row = idx + l * index_ld + (bit >> 3);
    for (int b = 0; b < bytes; ++b) {
      row[b] = static_cast<uint8_t>(row[b] | static_cast<uint8_t>(word >> (8 * b)));
    }
  }
}

// Compressed emission of one group per lane (mvue_emit_lanes, grad/emit_lanes.h).
template <int M>
inline void emit_generic(const __m512* out, int n, int m, int bits, const IndexChunks* ic, float* v,
                         int64_t value_ld, uint8_t* idx, int64_t index_ld, int64_t slot0) {
  if (ic != nullptr) {
    emit_vector<M>(out, n, m, bits, *ic, v, value_ld, idx, index_ld, slot0);
    return;
  }
  alignas(64) float tmp[64][16];
  for (int i = 0; i < m; ++i) _mm512_store_ps(tmp[i], out[i]);
  mvue_emit_lanes(&tmp[0][0], 16, n, m, bits, v, value_ld, idx, index_ld, slot0);
}

// 1:m with 16 index fields in 32 bits (m <= 4: 1:2, 1:3, 1:4): each group keeps one value, so
// the results of 16 group rows of each 16-column block are held and then written per column as
// one run of 16 values and 2 · bits index bytes, instead of a transpose, 16 single-value stores
// and 16 read-modify-writes of index bytes per group row (emit_vector). MVUE of dY 8192 x 3072
// along tokens, compressed, one thread, Zen 4: 1:2 151 -> 63-67 ms, 1:4 81.5 -> 38 ms.
struct OneOfMRows {
  alignas(64) float values[kColsMaxBlocks][16][16];  // [block][group row % 16][column]
  __m512i index[kColsMaxBlocks];                     // lane: the fields of 16 group rows
};

// The kept value and its position of 16 one-of-m groups: the one nonzero result (MVUE keeps at
// most one; the others are +0.0, so the sum is exact), else +0.0 at position 0: mvue_emit_lanes'
// canonical fill.
inline void one_of_m(const __m512* out, int m, __m512& value, __m512i& position) {
  value = out[0];
  position = _mm512_setzero_si512();
  for (int i = 1; i < m; ++i) {
    value = _mm512_add_ps(value, out[i]);
    const __mmask16 nz = _mm512_cmp_ps_mask(out[i], _mm512_setzero_ps(), _CMP_NEQ_UQ);
    position = _mm512_mask_mov_epi32(position, nz, _mm512_set1_epi32(i));
  }
}

// Writes group rows [kk_base, kk_base + rows) (kk_base % 16 == 0) of `blocks` blocks.
inline void flush_one_of_m(const OneOfMRows& held, int64_t blocks, int64_t rows, int bits,
                           int64_t kk_base, float* values, int64_t value_ld, uint8_t* indices,
                           int64_t index_ld) {
  const auto row_mask = static_cast<__mmask16>((1u << rows) - 1u);
  const int64_t index_bytes = (rows * bits + 7) / 8;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    __m512 r[16];
    __m512 t[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_load_ps(held.values[blk][j]);
    transpose16x16_ps(r, t);
    alignas(64) uint32_t words[16];
    _mm512_store_si512(words, held.index[blk]);
    for (int l = 0; l < 16; ++l) {
      const int64_t col = 16 * blk + l;
      _mm512_mask_storeu_ps(values + col * value_ld + kk_base, row_mask, t[l]);
      if (index_bytes > 0) {  // 1:1 has no index fields (and no index rows)
        std::memcpy(indices + col * index_ld + kk_base * bits / 8, &words[l],
                    static_cast<size_t>(index_bytes));
      }
    }
  }
}

// Where mvue_cols_m writes: its compressed or dense form (lanes == nullptr), or nm_wgrad's lane
// form (mvue_lanes_avx512).
struct LaneSink {
  float* values = nullptr;
  int32_t* lanes = nullptr;
  int64_t chunks = 0;  // 16-token chunks of the whole matrix
};

// Group kg's (absolute group row) results of 16 columns from column c (c % 16 == 0) into the
// lane form: the kept positions (the nonzero results, then the lowest others up to n) in
// increasing order, value and in-chunk token per slot. Slot s is taken by a position in [s, s + m
// - n], so each slot looks at m - n + 1 of them.
template <int M>
inline void emit_lane_slots(const __m512* out, int n, int m, int64_t kg, int64_t c,
                            const LaneSink& sink) {
  if constexpr (M > 0) m = M;
  const int per_chunk = 16 / m;
  const int64_t chunk = kg / per_chunk;
  const int j = static_cast<int>(kg % per_chunk);
  __mmask16 kept[16];
  __m512i count = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi32(1);
  for (int i = 0; i < m; ++i) {
    kept[i] = _mm512_cmp_ps_mask(out[i], _mm512_setzero_ps(), _CMP_NEQ_UQ);
    count = _mm512_mask_add_epi32(count, kept[i], count, one);
  }
  for (int i = 0; i < m; ++i) {  // the lowest unkept positions while fewer than n are kept
    const __mmask16 fill = static_cast<__mmask16>(
        _mm512_cmplt_epi32_mask(count, _mm512_set1_epi32(n)) & static_cast<__mmask16>(~kept[i]));
    kept[i] = static_cast<__mmask16>(kept[i] | fill);
    count = _mm512_mask_add_epi32(count, fill, count, one);
  }
  __m512i before[16];  // kept positions before position i, per lane
  __m512i running = _mm512_setzero_si512();
  for (int i = 0; i < m; ++i) {
    before[i] = running;
    running = _mm512_mask_add_epi32(running, kept[i], running, one);
  }
  const int64_t at = (((c / 32) * sink.chunks + chunk) * per_chunk * n + j * n) * 32 + c % 32;
  for (int s = 0; s < n; ++s) {
    __m512 value = _mm512_setzero_ps();
    __m512i lane = _mm512_setzero_si512();
    const __m512i slot = _mm512_set1_epi32(s);
    for (int i = s; i <= s + m - n; ++i) {
      const __mmask16 here = _mm512_mask_cmpeq_epi32_mask(kept[i], before[i], slot);
      value = _mm512_mask_mov_ps(value, here, out[i]);
      lane = _mm512_mask_mov_epi32(lane, here, _mm512_set1_epi32(j * m + i));
    }
    _mm512_stream_ps(sink.values + at + 32 * s, value);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(sink.lanes + at + 32 * s), lane);
  }
}

// mvue_cols_avx512 and mvue_lanes_avx512 for group size M (0: m at run time): group rows from
// row0 (their ids; src points at group row row0), into `lane` when it is set. With m known, the
// loops over a group's elements unroll: MVUE of dY 8192 x 3072 along tokens, compressed, one
// thread, Zen 4, ms with m at run time / fixed: 1:2 63-67 / 49-52, 1:4 38 / 35, 4:8 58 / 56-58,
// 8:16 55-58 / 52.
template <int M>
bool mvue_cols_m(const float* src, int64_t ld, int n, int m, int64_t group_rows, int64_t blocks,
                 int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key, float* dense,
                 int64_t dense_ld, float* values, int64_t value_ld, uint8_t* indices,
                 int64_t index_ld, int bits, const LaneSink* lane) {
  if constexpr (M > 0) m = M;
  __mmask16 bad = 0;
  const PhiloxRounds rounds = philox_rounds(key);
  const auto quarter = static_cast<long long>(cols / 4);
  const __m512i block_lo =
      _mm512_set_epi64(quarter + 3, quarter + 2, quarter + 1, quarter, 3, 2, 1, 0);
  const __m512i block_hi = _mm512_add_epi64(block_lo, _mm512_set1_epi64(2 * quarter));
  __m512 x[64];
  __m512 out[64];
  __m512i uw[kColsMaxBlocks][4];  // random words of 4 group rows, per block
  // The vector emission where it applies (emit_vector), the scalar one elsewhere.
  const IndexChunks chunks =
      bits > 0 && m <= 32 && n * bits <= kIndexWordBits ? index_chunks(m, bits) : IndexChunks{};
  const IndexChunks* vector_emit = chunks.chunks > 0 ? &chunks : nullptr;
  const bool one_of = lane == nullptr && dense == nullptr && n == 1 && 16 * bits <= 32;
  OneOfMRows held_rows;  // 34 KB of stack, used by one_of only
  OneOfMRows* const held = &held_rows;
  for (int64_t kk0 = 0; kk0 < group_rows; kk0 += 4) {
    const int64_t left = group_rows - kk0;
    const int batches = left < 4 ? static_cast<int>(left) : 4;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      __m512i w[1][4];
      const uint64_t first = static_cast<uint64_t>((row0 + kk0) * cols + col0 + 16 * blk) >> 2;
      philox16<1>(&first, block_lo, block_hi, rounds, w);
      interleave4(w[0], uw[blk]);
    }
    for (int j = 0; j < batches; ++j) {
      const int64_t kk = kk0 + j;
      // One group row: its m input rows read left to right across the blocks (m streams the
      // prefetcher follows; walking 4 group rows per block kept 4m streams and ran latency-bound),
      // with a prefetch 4 blocks ahead.
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c = 16 * blk;
        const float* p = src + kk * m * ld + c;
        for (int i = 0; i < m; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(p + i * ld + 64), _MM_HINT_T0);
          x[i] = _mm512_loadu_ps(p + i * ld);
        }
        mvue_generic16<M>(x, n, m, uw[blk][j], out, bad);
        if (lane != nullptr) {
          emit_lane_slots<M>(out, n, m, row0 + kk, col0 + c, *lane);
        } else if (dense != nullptr) {
          float* d = dense + kk * m * dense_ld + c;
          for (int i = 0; i < m; ++i) _mm512_storeu_ps(d + i * dense_ld, out[i]);
        } else if (one_of) {
          __m512 value;
          __m512i position;
          one_of_m(out, m, value, position);
          const int64_t row = kk % 16;
          _mm512_store_ps(held->values[blk][row], value);
          const __m512i field = _mm512_slli_epi32(position, static_cast<unsigned>(row * bits));
          held->index[blk] = row == 0 ? field : _mm512_or_si512(held->index[blk], field);
        } else {
          emit_generic<M>(out, n, m, bits, vector_emit, values + c * value_ld, value_ld,
                          indices + c * index_ld, index_ld, kk * n);
        }
      }
      if (one_of && (kk % 16 == 15 || kk + 1 == group_rows)) {
        flush_one_of_m(*held, blocks, kk % 16 + 1, bits, kk - kk % 16, values, value_ld, indices,
                       index_ld);
      }
    }
  }
  if (lane != nullptr) _mm_sfence();  // streamed stores before the caller's synchronisation
  return bad == 0;
}

// mvue_cols_m instantiated for m = 2, 4, 8, 16 and at run time: run(std::integral_constant<int,
// M>) calls the right one.
template <class Run>
bool with_fixed_m(int m, Run&& run) {
  switch (m) {
    case 2:
      return run(std::integral_constant<int, 2>{});
    case 4:
      return run(std::integral_constant<int, 4>{});
    case 8:
      return run(std::integral_constant<int, 8>{});
    case 16:
      return run(std::integral_constant<int, 16>{});
    default:
      return run(std::integral_constant<int, 0>{});
  }
}

}  // namespace

bool mvue_cols_avx512(const float* src, int64_t ld, int n, int m, int64_t group_rows,
                      int64_t blocks, int64_t cols, int64_t col0, const Mvue24Key& key,
                      float* dense, int64_t dense_ld, float* values, int64_t value_ld,
                      uint8_t* indices, int64_t index_ld, int bits) {
  return with_fixed_m(m, [&](auto fixed) {
    return mvue_cols_m<decltype(fixed)::value>(src, ld, n, m, group_rows, blocks, cols, 0, col0,
                                               key, dense, dense_ld, values, value_ld, indices,
                                               index_ld, bits, nullptr);
  });
}

bool mvue_lanes_avx512(const float* src, int64_t ld, int n, int m, int64_t group_rows,
                       int64_t blocks, int64_t cols, int64_t row0, int64_t col0,
                       const Mvue24Key& key, int64_t chunks, float* values, int32_t* lanes) {
  const LaneSink sink{values, lanes, chunks};
  return with_fixed_m(m, [&](auto fixed) {
    return mvue_cols_m<decltype(fixed)::value>(src, ld, n, m, group_rows, blocks, cols, row0, col0,
                                               key, nullptr, 0, nullptr, 0, nullptr, 0, 0, &sink);
  });
}

}  // namespace nms::detail
