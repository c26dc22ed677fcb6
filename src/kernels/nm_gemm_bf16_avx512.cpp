// AVX-512 BF16 kernel of nm_gemm_bf16 (nm_gemm_bf16_layout.h): a tile is 8 tokens x 32 rows of A,
// 16 fp32 accumulators + 8 X vectors (32 bf16 each) + 4 operand vectors = 28 zmm, the fp32 permute
// kernel's register plan (nm_gemm_lanes_avx512.cpp) with pairs of slots: per chunk the 8 token
// rows of X are loaded once; per pair, one value and one index vector per 16 rows feed 8 vpermw
// + 8 vdpbf16ps each. Compiled with -mavx512bf16 on top of the avx512 flags.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

#include "kernels/first_lanes_avx512.h"
#include "kernels/nm_gemm_bf16_layout.h"
#include "kernels/start_term_avx512.h"
#include "kernels/transpose16_avx512.h"

namespace nms::detail {
namespace {

constexpr int kTileTokens = 8;
// Chunks per K block: 64 (2048 columns), the fp32 kernel's 2048 columns. A row block's slab of
// one K block (64 chunks x 8 pairs x 256 bytes = 128 KB at 2:4) stays in L2 for the token block.
constexpr int64_t kDepthChunks = 64;

// The pairs [0, pairs) of one chunk (entries at v / ix) into the tile's accumulators.
template <int RT>
inline void chunk_pairs(const __m512i x[RT], const uint16_t* v, const uint16_t* ix, int64_t pairs,
                        __m512 acc0[RT], __m512 acc1[RT]) {
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(v + 2 * kBf16Rows * p);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(v + 2 * kBf16Rows * p + 32);
    const __m512i i0 = _mm512_load_si512(ix + 2 * kBf16Rows * p);
    const __m512i i1 = _mm512_load_si512(ix + 2 * kBf16Rows * p + 32);
    for (int t = 0; t < RT; ++t) {
      acc0[t] = _mm512_dpbf16_ps(acc0[t], (__m512bh)_mm512_permutexvar_epi16(i0, x[t]), w0);
      acc1[t] = _mm512_dpbf16_ps(acc1[t], (__m512bh)_mm512_permutexvar_epi16(i1, x[t]), w1);
    }
  }
}

// The Yᵀ form's tile load (a.y_transposed): acc0[t] / acc1[t] = rows row0 .. row0 + 15 / row0 +
// 16 .. row0 + 31 of token t0 + t, from Yᵀ (a later K block) or, in the first, from the start
// term (a.start_w set). Rows past a.rows and tokens past RT read as 0.
template <int RT>
inline void load_transposed(const NmGemmBf16Args& a, int64_t t0, int64_t row0, bool first,
                            __m512 acc0[RT], __m512 acc1[RT]) {
  const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
  const int64_t real = a.rows - row0;
  const __m256 lambda = _mm256_set1_ps(a.start_lambda);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 smallest_normal = _mm256_set1_ps(0x1p-126f);
  const auto row_of = [&](int64_t k) {
    if (k >= real) return _mm256_setzero_ps();
    if (!first) return _mm256_maskz_loadu_ps(tm, a.y + (row0 + k) * a.ldy + t0);
    const __m256 v = start_term8(a.start_w + (row0 + k) * a.start_ldw + t0,
                                 a.start_keep + (row0 + k) * a.start_ldkeep + t0, tm, lambda);
    // Denormal starts to signed zero: |v| < 2^-126 keeps only the sign bit.
    const __mmask8 denormal =
        _mm256_cmp_ps_mask(_mm256_andnot_ps(sign, v), smallest_normal, _CMP_LT_OQ);
    return _mm256_mask_and_ps(v, denormal, v, sign);
  };
  load_rows_transposed<RT>(row_of, acc0, acc1);
}

// RT tokens x 32 rows of A (row block b) over chunks [c0, c1): from 0 when c0 == 0, else from Y
// (in the Yᵀ form, a.y_transposed: from the start term when c0 == 0, load_transposed).
template <int RT>
inline void tile(const NmGemmBf16Args& a, const NmGemmBf16Layout& lay, int64_t t0, int64_t b,
                 int64_t c0, int64_t c1) {
  const int64_t row0 = kBf16Rows * b;
  const __mmask16 m0 = first_lanes(a.rows - row0);
  const __mmask16 m1 = first_lanes(a.rows - row0 - 16);
  const bool first = c0 == 0;
  __m512 acc0[RT];
  __m512 acc1[RT];
  if (a.y_transposed) {
    if (first && a.y_stage == nullptr) {
      // The tile's 32 rows of Yᵀ, fetched for ownership while the chunks run: 67 against 72 ms
      // at 4096 x 4096, T 512 (one thread, Zen 4).
      for (int64_t k = 0; k < std::min<int64_t>(kBf16Rows, a.rows - row0); ++k) {
        __builtin_prefetch(a.y + (row0 + k) * a.ldy + t0, 1, 3);
      }
    }
    if (first && a.start_w == nullptr) {
      for (int t = 0; t < RT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
    } else {
      load_transposed<RT>(a, t0, row0, first, acc0, acc1);
    }
  }
  for (int t = 0; t < RT && !a.y_transposed; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + row0;
    if (first) {
      // The tile's Y lines, fetched for ownership while the chunks run (the fp32 kernel's
      // prefetch: each tile's stores otherwise missed at its end).
      __builtin_prefetch(yr, 1, 3);
      if (m1 != 0) __builtin_prefetch(yr + 16, 1, 3);
      acc0[t] = acc1[t] = _mm512_setzero_ps();
    } else {
      acc0[t] = _mm512_maskz_loadu_ps(m0, yr);
      acc1[t] = _mm512_maskz_loadu_ps(m1, yr + 16);
    }
  }
  const int64_t full = std::min(c1, a.depth / kBf16Chunk);
  for (int64_t c = c0; c < full; ++c) {
    __m512i x[RT];
    for (int t = 0; t < RT; ++t) {
      x[t] = _mm512_loadu_si512(a.x + (t0 + t) * a.ldx + kBf16Chunk * c);
    }
    chunk_pairs<RT>(x, a.values + lay.offset(b, c, 0), a.index + lay.offset(b, c, 0),
                    lay.pairs_per_chunk, acc0, acc1);
  }
  if (full < c1) {  // the partial last chunk: its columns read, its real pairs only
    const int64_t cols = a.depth - kBf16Chunk * full;
    const auto km = static_cast<__mmask32>((uint64_t{1} << cols) - 1u);
    __m512i x[RT];
    for (int t = 0; t < RT; ++t) {
      x[t] = _mm512_maskz_loadu_epi16(km, a.x + (t0 + t) * a.ldx + kBf16Chunk * full);
    }
    const int64_t pairs = (cols / a.m * a.n + 1) / 2;
    chunk_pairs<RT>(x, a.values + lay.offset(b, full, 0), a.index + lay.offset(b, full, 0), pairs,
                    acc0, acc1);
  }
  if (a.y_transposed) {
    const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
    if (a.y_stage != nullptr && RT == 8) {
      // Whole 64-byte lines of Yᵀ: the pair's first tile goes to the stage, the second completes
      // each row's line and streams it out.
      const bool second = t0 % 16 == 8;
      float* stage = a.y_stage;
      store_rows_transposed<RT>(acc0, acc1, a.rows - row0, [&](int64_t k, __m256 v) {
        if (!second) {
          _mm256_store_ps(stage + 16 * k, v);
          return;
        }
        const __m512 line =
            _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_load_ps(stage + 16 * k)), v, 1);
        _mm512_stream_ps(a.y + (row0 + k) * a.ldy + t0 - 8, line);
      });
      return;
    }
    store_rows_transposed<RT>(acc0, acc1, a.rows - row0, [&](int64_t k, __m256 v) {
      _mm256_mask_storeu_ps(a.y + (row0 + k) * a.ldy + t0, tm, v);
    });
    return;
  }
  for (int t = 0; t < RT; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + row0;
    _mm512_mask_storeu_ps(yr, m0, acc0[t]);
    _mm512_mask_storeu_ps(yr + 16, m1, acc1[t]);
  }
}

// The remainder tile of RT < 8 tokens, dispatched on its size.
void tail_tile(const NmGemmBf16Args& a, const NmGemmBf16Layout& lay, int64_t rt, int64_t t,
               int64_t b, int64_t c0, int64_t c1) {
  switch (rt) {
    case 1:
      return tile<1>(a, lay, t, b, c0, c1);
    case 2:
      return tile<2>(a, lay, t, b, c0, c1);
    case 3:
      return tile<3>(a, lay, t, b, c0, c1);
    case 4:
      return tile<4>(a, lay, t, b, c0, c1);
    case 5:
      return tile<5>(a, lay, t, b, c0, c1);
    case 6:
      return tile<6>(a, lay, t, b, c0, c1);
    default:
      return tile<7>(a, lay, t, b, c0, c1);
  }
}

// canonical_slots of two groups of 4 (a byte of mask bits), for n = 1 .. 4: kCanonicalBytes[n -
// 1][byte]. Group by group, the padding took 14 ms of a Bi-Mask layer's 4096 x 4096 backward
// operand per step (44 against 28-30 ms of prep for transposable masks, whose groups are full).
constexpr auto kCanonicalBytes = [] {
  std::array<std::array<uint8_t, 256>, 4> table{};
  for (int n = 1; n <= 4; ++n) {
    for (uint32_t b = 0; b < 256; ++b) {
      table[n - 1][b] = static_cast<uint8_t>(canonical_slots(b & 15u, 15u, n) |
                                             canonical_slots(b >> 4, 15u, n) << 4);
    }
  }
  return table;
}();

// Per-nibble popcounts of x (8 groups of 4 bits), each in its nibble.
inline uint32_t nibble_counts(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  return (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
}

// One row's chunk (cols <= 32 columns at `a`, mask bits `bits`): its slots as 32-bit pairs, the
// bf16 values in `values` and, when `index` is set, their 16-bit columns in *index (element p =
// pair p; pairs past the chunk's slots 0). False when a group keeps more than n.
inline bool pack_row_chunk(const float* a, uint32_t bits, int64_t cols, int n, __m512i& values,
                           __m512i* index) {
  const uint32_t col_bits = cols >= 32 ? ~0u : (1u << cols) - 1u;
  const uint32_t nibbles_hi = 0x88888888u & col_bits;  // bit 3 of every nibble inside cols
  const uint32_t counts = nibble_counts(bits);
  const auto per_nibble = [](uint32_t v) { return v * 0x11111111u; };
  if (((counts + per_nibble(7u - static_cast<uint32_t>(n))) & nibbles_hi) != 0) return false;
  uint32_t slots = bits;
  if (((counts + per_nibble(8u - static_cast<uint32_t>(n))) & nibbles_hi) != nibbles_hi) {
    // Some group keeps fewer than n (a Bi-Mask backward mask, often): the canonical padding, two
    // groups per table lookup, groups past `cols` dropped.
    const uint8_t* table = kCanonicalBytes[n - 1].data();
    slots = 0;
    for (int k = 0; k < 4; ++k) slots |= uint32_t{table[(bits >> (8 * k)) & 0xffu]} << (8 * k);
    slots &= col_bits;
  }
  const auto lo = static_cast<__mmask16>(slots);
  const auto hi = static_cast<__mmask16>(slots >> 16);
  const __m512 v0 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits), a);
  const __m512 v1 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits >> 16), a + 16);
  const __m512 c0 = _mm512_maskz_compress_ps(lo, v0);
  const __m512 c1 = _mm512_maskz_compress_ps(hi, v1);
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i i0 = _mm512_maskz_compress_epi32(lo, iota);
  const __m512i i1 = _mm512_maskz_compress_epi32(hi, _mm512_add_epi32(iota, _mm512_set1_epi32(16)));
  // Slot j of the chunk: element j of c0 below k0 = popcount(lo), else element j - k0 of c1.
  const int k0 = std::popcount(static_cast<uint32_t>(lo));
  const int total = std::popcount(slots);
  const __m512i shift = _mm512_set1_epi32(16 - k0);
  const __m512i j_lo = iota;
  const __m512i j_hi = _mm512_add_epi32(iota, _mm512_set1_epi32(16));
  const __m512i from_lo = _mm512_mask_add_epi32(
      j_lo, _mm512_cmpge_epi32_mask(j_lo, _mm512_set1_epi32(k0)), j_lo, shift);
  const __m512i from_hi = _mm512_add_epi32(j_hi, shift);
  const auto valid_lo = static_cast<__mmask16>(total >= 16 ? 0xFFFFu : (1u << total) - 1u);
  const auto valid_hi = static_cast<__mmask16>(total <= 16 ? 0u : (1u << (total - 16)) - 1u);
  __m512 s0 = _mm512_maskz_permutex2var_ps(valid_lo, c0, from_lo, c1);
  __m512 s1 = _mm512_maskz_permutex2var_ps(valid_hi, c0, from_hi, c1);
  // Kept zeros stored as +0 (CompressedNm's canonical zero).
  s0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s0, _mm512_setzero_ps(), _CMP_NEQ_UQ), s0);
  s1 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s1, _mm512_setzero_ps(), _CMP_NEQ_UQ), s1);
  values = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(s1, s0));
  if (index == nullptr) return true;
  const __m512i x0 = _mm512_maskz_permutex2var_epi32(valid_lo, i0, from_lo, i1);
  const __m512i x1 = _mm512_maskz_permutex2var_epi32(valid_hi, i0, from_hi, i1);
  *index = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(x0)),
                              _mm512_cvtepi32_epi16(x1), 1);
  return true;
}

}  // namespace

namespace {

// Chunk c of row block b: per half block (16 rows), each row's slots as one vector of pairs, then
// a 16 x 16 transpose of 32-bit elements turns them into the layout's per-pair rows of 16 lanes.
// row_of(r): row r's 32 (or, in a partial last chunk, fewer) values of the chunk. p.index null:
// the values only.
template <class RowOf>
bool pack_m4_chunk(const NmGemmBf16PackArgs& p, const NmGemmBf16Layout& lay, int64_t b, int64_t c,
                   RowOf&& row_of) {
  const int64_t cols = std::min(kBf16Chunk, p.depth - c * kBf16Chunk);
  for (int64_t h = 0; h < 2; ++h) {
    __m512 v[16], x[16];
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t r = b * kBf16Rows + 16 * h + l;
      __m512i vi = _mm512_setzero_si512();
      __m512i xi = _mm512_setzero_si512();
      if (r < p.rows) {
        const uint32_t bits =
            static_cast<uint32_t>(p.mask[r * p.words_per_row + c / 2] >> (32 * (c % 2))) &
            (cols >= 32 ? ~0u : (1u << cols) - 1u);
        if (!pack_row_chunk(row_of(r), bits, cols, p.n, vi, p.index != nullptr ? &xi : nullptr)) {
          return false;
        }
      }
      v[l] = _mm512_castsi512_ps(vi);
      x[l] = _mm512_castsi512_ps(xi);
    }
    transpose16(v);
    for (int64_t q = 0; q < lay.pairs_per_chunk; ++q) {
      _mm512_store_si512(p.values + lay.offset(b, c, q) + 32 * h, _mm512_castps_si512(v[q]));
    }
    if (p.index == nullptr) continue;
    transpose16(x);
    for (int64_t q = 0; q < lay.pairs_per_chunk; ++q) {
      _mm512_store_si512(p.index + lay.offset(b, c, q) + 32 * h, _mm512_castps_si512(x[q]));
    }
  }
  return true;
}

}  // namespace

bool nm_gemm_bf16_pack_m4_avx512(const NmGemmBf16PackArgs& p, int64_t b) {
  const NmGemmBf16Layout lay(p.rows, p.depth, p.n, 4);
  for (int64_t c = 0; c < lay.chunks; ++c) {
    const auto row_of = [&](int64_t r) { return p.a + r * p.lda + c * kBf16Chunk; };
    if (!pack_m4_chunk(p, lay, b, c, row_of)) return false;
  }
  return true;
}

bool nm_gemm_bf16_pack_m4_staged_avx512(const NmGemmBf16PackArgs& p, int64_t b, int64_t c,
                                        const float* stage, int64_t stage_row0) {
  const NmGemmBf16Layout lay(p.rows, p.depth, p.n, 4);
  const auto row_of = [&](int64_t r) { return stage + (r - stage_row0) * kBf16Chunk; };
  return pack_m4_chunk(p, lay, b, c, row_of);
}

// Per half block (16 rows) and chunk of 32 columns: each row's 16 slots (8 pairs) as bf16 values
// and 16-bit columns ((s / 2) · 4 + its 2-bit index), then a 16 x 16 transpose of 32-bit elements
// into the layout's per-pair rows of 16 lanes (as nm_gemm_bf16_pack_m4_avx512).
void nm_gemm_bf16_pack_compressed24_avx512(const NmGemmBf16CompressedArgs& p, int64_t b) {
  const NmGemmBf16Layout lay(p.rows, p.depth, 2, 4);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i shifts = _mm512_slli_epi32(lane, 1);  // slot s: bits 2s, 2s + 1
  const __m512i group_base = _mm512_slli_epi32(_mm512_srli_epi32(lane, 1), 2);  // (s / 2) · 4
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t c = 0; c < lay.chunks; ++c) {
      const int64_t cols = std::min(kBf16Chunk, p.depth - c * kBf16Chunk);
      const __mmask16 slot_lanes = first_lanes(cols / 2);
      const auto byte_lanes = static_cast<__mmask16>((1u << ((cols + 7) / 8)) - 1u);
      __m512 v[16], x[16];
      for (int64_t l = 0; l < 16; ++l) {
        const int64_t r = b * kBf16Rows + 16 * h + l;
        if (r >= p.rows) {
          v[l] = x[l] = _mm512_setzero_ps();
          continue;
        }
        const __m512 f = _mm512_maskz_loadu_ps(slot_lanes, p.values + r * p.values_ld + 16 * c);
        const __m256i bf = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
        const __m128i bytes = _mm_maskz_loadu_epi8(byte_lanes, p.indices + r * p.index_ld + 4 * c);
        const __m512i bits = _mm512_set1_epi32(_mm_cvtsi128_si32(bytes));
        const __m512i column = _mm512_maskz_add_epi32(
            slot_lanes, _mm512_and_si512(_mm512_srlv_epi32(bits, shifts), _mm512_set1_epi32(3)),
            group_base);
        v[l] = _mm512_castsi512_ps(_mm512_castsi256_si512(bf));
        x[l] = _mm512_castsi512_ps(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(column)));
      }
      transpose16(v);
      transpose16(x);
      for (int64_t q = 0; q < lay.pairs_per_chunk; ++q) {
        const int64_t at = lay.offset(b, c, q) + 32 * h;
        _mm512_store_si512(p.dst_values + at, _mm512_castps_si512(v[q]));
        _mm512_store_si512(p.dst_index + at, _mm512_castps_si512(x[q]));
      }
    }
  }
}

void nm_gemm_bf16_avx512(const NmGemmBf16Args& args, int64_t t_begin, int64_t t_end,
                         int64_t b_begin, int64_t b_end) {
  const NmGemmBf16Layout lay(args.rows, args.depth, args.n, args.m);
  alignas(64) float stage[kBf16Rows * 16];
  NmGemmBf16Args a = args;
  // Streamed lines only where one K block writes Yᵀ once (with more, later blocks reload it).
  const bool stream = args.y_stream && lay.chunks <= kDepthChunks && (t_end - t_begin) % 16 == 0 &&
                      t_begin % 16 == 0;
  a.y_stage = stream ? stage : nullptr;
  for (int64_t c0 = 0; c0 < lay.chunks; c0 += kDepthChunks) {
    const int64_t c1 = std::min(lay.chunks, c0 + kDepthChunks);
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t t = t_begin;
      for (; t + kTileTokens <= t_end; t += kTileTokens) tile<kTileTokens>(a, lay, t, b, c0, c1);
      if (t < t_end) tail_tile(a, lay, t_end - t, t, b, c0, c1);
    }
  }
  if (a.y_stage != nullptr) _mm_sfence();
}

void round_rows_to_bf16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                               uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * ldx;
    uint16_t* out = dst + r * cols;
    for (int64_t j = 0; j < cols; j += 32) {
      const int64_t left = cols - j;
      const __mmask16 lo = first_lanes(left);
      const __mmask16 hi = first_lanes(left - 16);
      const __m512 a = _mm512_maskz_loadu_ps(lo, src + j);
      const __m512 b = _mm512_maskz_loadu_ps(hi, src + j + 16);
      const auto km = static_cast<__mmask32>(lo | (static_cast<uint32_t>(hi) << 16));
      _mm512_mask_storeu_epi16(out + j, km, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
    }
  }
}

void round_transposed_to_bf16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                                     uint16_t* dst, int64_t ld_dst) {
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    const __mmask16 row_lanes = first_lanes(rows - i0);
    for (int64_t j0 = 0; j0 < cols; j0 += 16) {
      const __mmask16 col_lanes = first_lanes(cols - j0);
      __m512 r[16];
      for (int64_t k = 0; k < 16; ++k) {
        r[k] = i0 + k < rows ? _mm512_maskz_loadu_ps(col_lanes, x + (i0 + k) * ldx + j0)
                             : _mm512_setzero_ps();
      }
      transpose16(r);  // r[k]: column j0 + k, rows i0 .. i0 + 15
      for (int64_t k = 0; k < 16 && j0 + k < cols; ++k) {
        const __m256i b = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(r[k]));
        _mm256_mask_storeu_epi16(dst + (j0 + k) * ld_dst + i0, row_lanes, b);
      }
    }
  }
}

}  // namespace nms::detail
