// AVX-512 BF16 kernel of nm_gemm_bf16 (nm_gemm_bf16_layout.h): a tile is 8 tokens x 32 rows of A,
// 16 fp32 accumulators + 8 X vectors (32 bf16 each) + 4 operand vectors = 28 zmm, the fp32 permute
// kernel's register plan (nm_gemm_lanes_avx512.cpp) with pairs of slots: per chunk the 8 token
// rows of X are loaded once; per pair, one value and one index vector per 16 rows feed 8 vpermw
// + 8 vdpbf16ps each. Compiled with -mavx512bf16 on top of the avx512 flags.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/nm_gemm_bf16_layout.h"

namespace nms::detail {
namespace {

constexpr int kTileTokens = 8;
// Chunks per K block: 64 (2048 columns), the fp32 kernel's 2048 columns. A row block's slab of
// one K block (64 chunks x 8 pairs x 256 bytes = 128 KB at 2:4) stays in L2 for the token block.
constexpr int64_t kDepthChunks = 64;

inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

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

// RT tokens x 32 rows of A (row block b) over chunks [c0, c1): from 0 when c0 == 0, else from Y.
template <int RT>
inline void tile(const NmGemmBf16Args& a, const NmGemmBf16Layout& lay, int64_t t0, int64_t b,
                 int64_t c0, int64_t c1) {
  const int64_t row0 = kBf16Rows * b;
  const __mmask16 m0 = first_lanes(a.rows - row0);
  const __mmask16 m1 = first_lanes(a.rows - row0 - 16);
  const bool first = c0 == 0;
  __m512 acc0[RT];
  __m512 acc1[RT];
  for (int t = 0; t < RT; ++t) {
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

}  // namespace

void nm_gemm_bf16_avx512(const NmGemmBf16Args& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                         int64_t b_end) {
  const NmGemmBf16Layout lay(a.rows, a.depth, a.n, a.m);
  for (int64_t c0 = 0; c0 < lay.chunks; c0 += kDepthChunks) {
    const int64_t c1 = std::min(lay.chunks, c0 + kDepthChunks);
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t t = t_begin;
      for (; t + kTileTokens <= t_end; t += kTileTokens) tile<kTileTokens>(a, lay, t, b, c0, c1);
      if (t < t_end) tail_tile(a, lay, t_end - t, t, b, c0, c1);
    }
  }
}

}  // namespace nms::detail
