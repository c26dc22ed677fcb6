// AVX-512 kernel of nm_gemm (see nm_gemm_avx512.h): output-vectorised, lanes = 16 output
// features, two vectors per row block of 32; per chunk of 16 along K, RT token rows of X are loaded
// once and every slot permutes them by its lane indices (vpermps) into a fused multiply-add.
#include "kernels/nm_gemm_avx512.h"

#include <immintrin.h>

#include <cstdint>

#include "kernels/nm_gemm_layout.h"

namespace nms::detail {
namespace {

constexpr int kTileTokens = 8;  // RT: 16 accumulators + 8 X vectors + 4 operands = 28 zmm
constexpr int64_t kDepthBlock =
    32;  // chunks per K block (512 along K): 2 row blocks' slabs in L1/L2

// RT tokens x 32 outputs of row block b over chunks [c0, c1); accumulates into y (first: from 0).
template <int RT>
inline void tile(const NmGemmArgs& a, int64_t t0, int64_t b, int64_t c0, int64_t c1, bool first) {
  const int64_t col0 = 32 * b;
  const int64_t valid = a.rows - col0 < 32 ? a.rows - col0 : 32;
  const auto m0 = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1u);
  const auto m1 = static_cast<__mmask16>(valid >= 32   ? 0xFFFF
                                         : valid <= 16 ? 0
                                                       : (1u << (valid - 16)) - 1u);
  __m512 acc0[RT];
  __m512 acc1[RT];
  for (int t = 0; t < RT; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + col0;
    acc0[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, yr);
    acc1[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, yr + 16);
  }
  const int64_t tail = a.depth % 16;
  for (int64_t c = c0; c < c1; ++c) {
    const auto km =
        static_cast<__mmask16>(c == a.chunks - 1 && tail != 0 ? (1u << tail) - 1u : 0xFFFFu);
    __m512 x[RT];
    for (int t = 0; t < RT; ++t) x[t] = _mm512_maskz_loadu_ps(km, a.x + (t0 + t) * a.ldx + 16 * c);
    const int64_t base = ((b * a.chunks + c) * a.slots) * 32;
    const float* v = a.values + base;
    const uint8_t* l = a.lanes + base;
    for (int64_t s = 0; s < a.slots; ++s) {
      const __m512 w0 = _mm512_load_ps(v + 32 * s);
      const __m512 w1 = _mm512_load_ps(v + 32 * s + 16);
      const __m512i i0 =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l + 32 * s)));
      const __m512i i1 =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l + 32 * s + 16)));
      for (int t = 0; t < RT; ++t) {
        acc0[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, x[t]), w0, acc0[t]);
        acc1[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, x[t]), w1, acc1[t]);
      }
    }
  }
  for (int t = 0; t < RT; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + col0;
    _mm512_mask_storeu_ps(yr, m0, acc0[t]);
    _mm512_mask_storeu_ps(yr + 16, m1, acc1[t]);
  }
}

template <int RT>
void tile_dispatch(const NmGemmArgs& a, int64_t t0, int rt, int64_t b, int64_t c0, int64_t c1,
                   bool first) {
  if constexpr (RT > 0) {
    if (rt == RT) {
      tile<RT>(a, t0, b, c0, c1, first);
    } else {
      tile_dispatch<RT - 1>(a, t0, rt, b, c0, c1, first);
    }
  }
}

}  // namespace

void nm_gemm_avx512_rows(const NmGemmArgs& a, int64_t t_begin, int64_t t_end) {
  for (int64_t c0 = 0; c0 < a.chunks; c0 += kDepthBlock) {
    const int64_t c1 = c0 + kDepthBlock < a.chunks ? c0 + kDepthBlock : a.chunks;
    for (int64_t b = 0; b < a.blocks; ++b) {
      for (int64_t t0 = t_begin; t0 < t_end; t0 += kTileTokens) {
        const int rt = static_cast<int>(t_end - t0 < kTileTokens ? t_end - t0 : kTileTokens);
        if (rt == kTileTokens) {
          tile<kTileTokens>(a, t0, b, c0, c1, c0 == 0);
        } else {
          tile_dispatch<kTileTokens - 1>(a, t0, rt, b, c0, c1, c0 == 0);
        }
      }
    }
  }
}

}  // namespace nms::detail
