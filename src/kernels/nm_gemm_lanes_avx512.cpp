// AVX-512 permute kernel of nm_gemm (nm_gemm_lanes.h): a tile is 8 tokens x 32 rows of A, 16
// accumulators + 8 X vectors + 4 operand vectors = 28 zmm. Per chunk of 16 columns the 8 token
// rows of X are loaded once; per kept slot one value and one index vector per 16 rows feed 8
// vpermps + 8 FMAs each. Zen 4 (bench_port_mix, one thread): register-fed FMAs 3.6 G/s,
// permute-fed 2.7 G/s, load-fed 3.1 G/s, OpenBLAS ~3.3 G/s; the broadcast kernel's 10 loads per 8
// FMAs put it at 1.11-1.27x of OpenBLAS at 2:4 there, this one at 1.34-1.48x
// (a standalone copy with fewer spills: 1.51-1.6x; docs/performance.md, "On Zen 4").
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/nm_gemm_lanes_layout.h"

namespace nms::detail {
namespace {

constexpr int kTileTokens = 8;
// Chunks per K block: 128 (2048 columns). The Y tile is stored and reloaded once per K block; the
// block's slab of one row block (128 chunks x 8 slots x 32 rows x 8 bytes = 256 KB at 2:4) stays
// in L2 for the token block. Measured on a standalone copy of the kernel at 2:4, one thread, Zen 4
// (speedup vs OpenBLAS, T 8192 x 768 -> 3072 / 2048^3): 16 chunks 1.29x, 32 1.36 / 1.44x, 64
// 1.49 / 1.52x, 128 1.48 / 1.52-1.55x.
constexpr int64_t kDepthChunks = 128;

inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

// RT tokens x 32 rows of A (row block b) over chunks [c0, c1): from 0 when c0 == 0, else from Y.
template <int RT>
inline void tile(const NmGemmLaneArgs& a, const NmGemmLaneLayout& lay, int64_t t0, int64_t b,
                 int64_t c0, int64_t c1) {
  const int64_t row0 = kLaneRows * b;
  const __mmask16 m0 = first_lanes(a.rows - row0);
  const __mmask16 m1 = first_lanes(a.rows - row0 - 16);
  const bool first = c0 == 0;
  __m512 acc0[RT];
  __m512 acc1[RT];
  for (int t = 0; t < RT; ++t) {
    const float* yr = a.y + (t0 + t) * a.ldy + row0;
    acc0[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, yr);
    acc1[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, yr + 16);
  }
  // Whole chunks. Written plainly (indexing from the chunk's base, the slot count fixed): GCC 12
  // kept the 32 accumulator halves on the stack across chunks with pointer-bumping loops or a
  // helper taking the arrays by reference (two extra memory operations per vpermps + FMA pair).
  const int64_t per_chunk = lay.slots_per_chunk;
  const int64_t full = std::min(c1, a.depth / kLaneChunk);
  for (int64_t c = c0; c < full; ++c) {
    __m512 x[RT];
    const float* v = a.values + lay.offset(b, c, 0);
    const int32_t* l = a.lanes + lay.offset(b, c, 0);
    for (int t = 0; t < RT; ++t) x[t] = _mm512_loadu_ps(a.x + (t0 + t) * a.ldx + kLaneChunk * c);
    for (int64_t s = 0; s < per_chunk; ++s) {
      const __m512 w0 = _mm512_load_ps(v + kLaneRows * s);
      const __m512 w1 = _mm512_load_ps(v + kLaneRows * s + 16);
      const __m512i i0 = _mm512_load_si512(l + kLaneRows * s);
      const __m512i i1 = _mm512_load_si512(l + kLaneRows * s + 16);
      for (int t = 0; t < RT; ++t) {
        acc0[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, x[t]), w0, acc0[t]);
        acc1[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, x[t]), w1, acc1[t]);
      }
    }
  }
  if (full < c1) {  // the partial last chunk: its real slots only (padding would add fma(0, x))
    const int64_t cols = a.depth - kLaneChunk * full;
    const auto km = static_cast<__mmask16>((1u << cols) - 1u);
    __m512 x[RT];
    for (int t = 0; t < RT; ++t) {
      x[t] = _mm512_maskz_loadu_ps(km, a.x + (t0 + t) * a.ldx + kLaneChunk * full);
    }
    const float* v = a.values + lay.offset(b, full, 0);
    const int32_t* l = a.lanes + lay.offset(b, full, 0);
    for (int64_t s = 0; s < cols / a.m * a.n; ++s) {
      const __m512 w0 = _mm512_load_ps(v + kLaneRows * s);
      const __m512 w1 = _mm512_load_ps(v + kLaneRows * s + 16);
      const __m512i i0 = _mm512_load_si512(l + kLaneRows * s);
      const __m512i i1 = _mm512_load_si512(l + kLaneRows * s + 16);
      for (int t = 0; t < RT; ++t) {
        acc0[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, x[t]), w0, acc0[t]);
        acc1[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, x[t]), w1, acc1[t]);
      }
    }
  }
  for (int t = 0; t < RT; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + row0;
    _mm512_mask_storeu_ps(yr, m0, acc0[t]);
    _mm512_mask_storeu_ps(yr + 16, m1, acc1[t]);
  }
}

template <int RT>
void tile_tail(const NmGemmLaneArgs& a, const NmGemmLaneLayout& lay, int rt, int64_t t0, int64_t b,
               int64_t c0, int64_t c1) {
  if constexpr (RT > 0) {
    if (rt == RT) {
      tile<RT>(a, lay, t0, b, c0, c1);
    } else {
      tile_tail<RT - 1>(a, lay, rt, t0, b, c0, c1);
    }
  }
}

}  // namespace

void nm_gemm_lanes_avx512(const NmGemmLaneArgs& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                          int64_t b_end) {
  const NmGemmLaneLayout lay(a.rows, a.depth, a.n, a.m);
  for (int64_t c0 = 0; c0 < lay.chunks; c0 += kDepthChunks) {
    const int64_t c1 = c0 + kDepthChunks < lay.chunks ? c0 + kDepthChunks : lay.chunks;
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t t0 = t_begin;
      for (; t0 + kTileTokens <= t_end; t0 += kTileTokens) {
        tile<kTileTokens>(a, lay, t0, b, c0, c1);
      }
      if (t0 < t_end)
        tile_tail<kTileTokens - 1>(a, lay, static_cast<int>(t_end - t0), t0, b, c0, c1);
    }
  }
}

}  // namespace nms::detail
