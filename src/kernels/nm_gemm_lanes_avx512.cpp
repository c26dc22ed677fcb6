// AVX-512 permute kernel of nm_gemm (nm_gemm_lanes.h): a tile is 8 tokens x 32 rows of A, 16
// accumulators + 8 X vectors + 4 operand vectors = 28 zmm. Per chunk of 16 columns the 8 token
// rows of X are loaded once; per kept slot one value and one index vector per 16 rows feed 8
// vpermps + 8 FMAs each. Zen 4 (bench_port_mix, one thread): register-fed FMAs 3.6 G/s,
// permute-fed 2.7 G/s, load-fed 3.1 G/s, OpenBLAS ~3.3 G/s; the broadcast kernel's 10 loads per 8
// FMAs put it at 1.11-1.27x of OpenBLAS at 2:4 there, this one at 1.34-1.48x
// (a standalone copy with fewer spills: 1.51-1.6x; docs/performance.md, "On Zen 4").
// The hybrid pass below adds load-fed FMAs to the same loop: nm_wgrad's Yᵀ form with its own
// panels, and the forward and backward-data products' row-major Y with panels packed here.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/first_lanes_avx512.h"
#include "kernels/nm_gemm_lanes_layout.h"
#include "kernels/start_term_avx512.h"
#include "kernels/transpose16_avx512.h"
#include "nmsparse/core/aligned_buffer.h"

namespace nms::detail {
namespace {

constexpr int kTileTokens = 8;
// Chunks per K block: 128 (2048 columns). The Y tile is stored and reloaded once per K block; the
// block's slab of one row block (128 chunks x 8 slots x 32 rows x 8 bytes = 256 KB at 2:4) stays
// in L2 for the token block. Measured on a standalone copy of the kernel at 2:4, one thread, Zen 4
// (speedup vs OpenBLAS, T 8192 x 768 -> 3072 / 2048^3): 16 chunks 1.29x, 32 1.36 / 1.44x, 64
// 1.49 / 1.52x, 128 1.48 / 1.52-1.55x.
constexpr int64_t kDepthChunks = 128;

// The hybrid route's super-tile stage: its 32 rows x 64 or 128 tokens of Y, row r's token t_super +
// i at stage[r · kStageLd + i]. A super-tile starts it from the start term (the first K block with
// a.start_w set: λ · w where the keep byte is 0, 0 where it is not, load_transposed's arithmetic)
// or from Y (a later K block), its passes load and store their tiles there, and it goes back to Y
// row by row. A row-major Y stages only the load-fed tokens (through 16 x 16 transposes each way;
// the permute-fed tiles are rows of Y already and stay in place). In place, a pass's 32 rows of Y,
// W and the keep bytes (16 KB, 16 KB and 4 KB apart at 4096 features) fell into one L1 set; the
// stage's rows (576 bytes apart) spread over sets and each row of Y, W and the keep bytes is read
// or written as consecutive lines. One thread, Zen 4, T 512 x 4096 -> 4096 2:4: nm_wgrad 117-133
// -> 114-117 ms (`bench_wgrad --benchmark_filter=BM_NmWgrad/0/3/1/0`, three alternating runs), the
// decay's extra cost 15.0 / 16.6 -> 11.2 / 9.1 ms (`--benchmark_filter=NmWgradDecay/3`, two). T
// 8192 and 2048^3 measured within the noise (super-tiles of 128 tokens). Software prefetching the
// next super-tile's rows changed nothing measurable.
constexpr int64_t kStageLd = kLaneHybridMaxTokens + 16;

inline void stage_start_term(const NmGemmLaneArgs& a, int64_t row0, int64_t t_super, int64_t super,
                             float* stage) {
  const __m512 lambda = _mm512_set1_ps(a.start_lambda);
  const int64_t rows = std::min<int64_t>(kLaneRows, a.rows - row0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = a.start_w + (row0 + r) * a.start_ldw + t_super;
    const uint8_t* keep = a.start_keep + (row0 + r) * a.start_ldkeep + t_super;
    for (int64_t i = 0; i < super; i += 16) {
      const __m512i k32 =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keep + i)));
      _mm512_store_ps(
          stage + r * kStageLd + i,
          _mm512_maskz_mul_ps(_mm512_testn_epi32_mask(k32, k32), lambda, _mm512_loadu_ps(w + i)));
    }
  }
}

// The Yᵀ form's tile load: acc0[t] / acc1[t] = rows row0 .. row0 + 15 / row0 + 16 .. row0 + 31
// of token t0 + t, from Yᵀ (a later K block) or, in the first, from the start term. Rows past
// a.rows and tokens past RT read as 0.
template <int RT>
inline void load_transposed(const NmGemmLaneArgs& a, int64_t t0, int64_t row0, bool first,
                            __m512 acc0[RT], __m512 acc1[RT]) {
  const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
  const int64_t real = a.rows - row0;
  const __m256 lambda = _mm256_set1_ps(a.start_lambda);
  const auto row_of = [&](int64_t k) {
    if (k >= real) return _mm256_setzero_ps();
    if (!first) return _mm256_maskz_loadu_ps(tm, a.y + (row0 + k) * a.ldy + t0);
    return start_term8(a.start_w + (row0 + k) * a.start_ldw + t0,
                       a.start_keep + (row0 + k) * a.start_ldkeep + t0, tm, lambda);
  };
  load_rows_transposed<RT>(row_of, acc0, acc1);
}

// The Yᵀ form's tile store: the inverse of load_transposed (only real rows and the RT tokens).
template <int RT>
inline void store_transposed(const NmGemmLaneArgs& a, int64_t t0, int64_t row0,
                             const __m512 acc0[RT], const __m512 acc1[RT]) {
  const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
  store_rows_transposed<RT>(acc0, acc1, a.rows - row0, [&](int64_t k, __m256 v) {
    _mm256_mask_storeu_ps(a.y + (row0 + k) * a.ldy + t0, tm, v);
  });
}

// A row-major Y's tile rows: acc0[t] / acc1[t] = rows row0 .. row0 + 15 / row0 + 16 .. row0 + 31
// of token t0 + t (rows past a.rows read as 0), the prefetch of their lines for writing, and their
// store (real rows only), at the last K block (`last`) adding the bias (one rounded addition after
// the chain, as add_bias) and, with `stream`, writing each token's two whole lines around the
// cache.
template <int RT>
inline void load_rows(const NmGemmLaneArgs& a, int64_t t0, int64_t row0, __m512 acc0[RT],
                      __m512 acc1[RT]) {
  const __mmask16 m0 = first_lanes(a.rows - row0);
  const __mmask16 m1 = first_lanes(a.rows - row0 - 16);
  for (int t = 0; t < RT; ++t) {
    const float* yr = a.y + (t0 + t) * a.ldy + row0;
    acc0[t] = _mm512_maskz_loadu_ps(m0, yr);
    acc1[t] = _mm512_maskz_loadu_ps(m1, yr + 16);
  }
}

template <int RT>
inline void prefetch_rows(const NmGemmLaneArgs& a, int64_t t0, int64_t row0) {
  for (int t = 0; t < RT; ++t) {
    const float* yr = a.y + (t0 + t) * a.ldy + row0;
    __builtin_prefetch(yr, 1, 3);
    if (a.rows - row0 > 16) __builtin_prefetch(yr + 16, 1, 3);
  }
}

template <int RT>
inline void store_rows(const NmGemmLaneArgs& a, int64_t t0, int64_t row0, bool last, bool stream,
                       __m512 acc0[RT], __m512 acc1[RT]) {
  const __mmask16 m0 = first_lanes(a.rows - row0);
  const __mmask16 m1 = first_lanes(a.rows - row0 - 16);
  if (last && a.bias != nullptr) {
    const __m512 bias0 = _mm512_maskz_loadu_ps(m0, a.bias + row0);
    const __m512 bias1 = _mm512_maskz_loadu_ps(m1, a.bias + row0 + 16);
    for (int t = 0; t < RT; ++t) {
      acc0[t] = _mm512_add_ps(acc0[t], bias0);
      acc1[t] = _mm512_add_ps(acc1[t], bias1);
    }
  }
  for (int t = 0; t < RT; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + row0;
    if (stream) {
      _mm512_stream_ps(yr, acc0[t]);
      _mm512_stream_ps(yr + 16, acc1[t]);
    } else {
      _mm512_mask_storeu_ps(yr, m0, acc0[t]);
      _mm512_mask_storeu_ps(yr + 16, m1, acc1[t]);
    }
  }
}

// RT tokens x 32 rows of A (row block b) over chunks [c0, c1): from 0 when c0 == 0, else from Y
// (in the Yᵀ form, from the start term when c0 == 0 and a.start_w is set).
template <int RT>
inline void tile(const NmGemmLaneArgs& a, const NmGemmLaneLayout& lay, int64_t t0, int64_t b,
                 int64_t c0, int64_t c1) {
  const int64_t row0 = kLaneRows * b;
  const bool first = c0 == 0;
  // The row-major tile's Y lines (2 per token), prefetched before its chunks run: without this
  // each tile's 16 stores missed at its end, an ownership read from memory apiece. One thread,
  // Zen 4, 2:4, ms (speedup vs OpenBLAS, `bench_nm_gemm`): T 6400 x 192 -> 768 (12 chunks per
  // tile) 15.4 -> 12.6 (1.17-1.22x -> 1.47x), T 8192 x 768 -> 3072 254 -> 240 (1.40x -> 1.49x).
  // prefetchw (-mprfchw) measured the same as the prefetcht0 GCC emits without it, and prefetching
  // the next tile's lines in later K blocks (whose tiles load Y first) gained under 1 %.
  const bool last = c1 == lay.chunks;
  const bool stream = a.y_stream && last && !a.y_transposed && a.rows - row0 >= kLaneRows;
  if (first && !a.y_transposed && !stream) prefetch_rows<RT>(a, t0, row0);
  __m512 acc0[RT];
  __m512 acc1[RT];
  if (a.y_transposed && (!first || a.start_w != nullptr)) {
    load_transposed<RT>(a, t0, row0, first, acc0, acc1);
  } else if (first) {
    for (int t = 0; t < RT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  } else {
    load_rows<RT>(a, t0, row0, acc0, acc1);
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
  if (a.y_transposed) {
    store_transposed<RT>(a, t0, row0, acc0, acc1);
  } else {
    store_rows<RT>(a, t0, row0, last, stream, acc0, acc1);
  }
}

// The hybrid pass's tile load and store in the super-tile's stage: `src` / `dst` at the tile's
// first token in row 0 of the block; real rows only (the others load as 0 and are not stored).
template <int RT>
inline void load_staged(const float* src, int64_t real, __m512 acc0[RT], __m512 acc1[RT]) {
  const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
  load_rows_transposed<RT>(
      [&](int64_t k) {
        return k < real ? _mm256_maskz_loadu_ps(tm, src + k * kStageLd) : _mm256_setzero_ps();
      },
      acc0, acc1);
}

template <int RT>
inline void store_staged(float* dst, int64_t real, const __m512 acc0[RT], const __m512 acc1[RT]) {
  const auto tm = static_cast<__mmask8>((1u << RT) - 1u);
  store_rows_transposed<RT>(acc0, acc1, real, [&](int64_t k, __m256 v) {
    _mm256_mask_storeu_ps(dst + k * kStageLd, tm, v);
  });
}

// Y's rows of a super-tile into its stage (a later K block), and the stage back into Y (real rows).
inline void stage_from_y(const NmGemmLaneArgs& a, int64_t row0, int64_t t_super, int64_t super,
                         float* stage) {
  const int64_t rows = std::min<int64_t>(kLaneRows, a.rows - row0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* y = a.y + (row0 + r) * a.ldy + t_super;
    for (int64_t i = 0; i < super; i += 16) {
      _mm512_store_ps(stage + r * kStageLd + i, _mm512_loadu_ps(y + i));
    }
  }
}

// The same for a row-major Y (the forward and backward-data products), whose stage holds only a
// super-tile's load-fed kLanePanel tokens, from ta (`stage` at the first of them): 16 x 16
// transposes of the tokens x each 16 rows (4 blocks of 64 shuffles against the 131 072 FMAs of the
// passes over a K block of 128 chunks at 2:4, 49 152 at 768 columns). Rows past a.rows are neither
// read nor written (they stage as 0).
inline void stage_from_rows(const NmGemmLaneArgs& a, int64_t row0, int64_t ta, float* stage) {
  for (int64_t h = 0; h < kLaneRows / 16; ++h) {
    const __mmask16 rm = first_lanes(a.rows - row0 - 16 * h);
    if (rm == 0) break;
    for (int64_t i = 0; i < kLanePanel; i += 16) {
      __m512 r[16];
      for (int j = 0; j < 16; ++j) {
        r[j] = _mm512_maskz_loadu_ps(rm, a.y + (ta + i + j) * a.ldy + row0 + 16 * h);
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_store_ps(stage + (16 * h + j) * kStageLd + i, r[j]);
    }
  }
}

// The inverse, at the last K block (`last`) adding the bias (one rounded addition after each
// chain, add_bias's bits) and, with a.y_stream, writing each token's whole lines around the cache.
inline void stage_to_rows(const NmGemmLaneArgs& a, int64_t row0, int64_t ta, const float* stage,
                          bool last) {
  const int64_t real = a.rows - row0;
  for (int64_t h = 0; h < kLaneRows / 16; ++h) {
    const __mmask16 rm = first_lanes(real - 16 * h);
    if (rm == 0) break;
    const bool stream = a.y_stream && last && rm == 0xFFFF;
    const __m512 bias = last && a.bias != nullptr
                            ? _mm512_maskz_loadu_ps(rm, a.bias + row0 + 16 * h)
                            : _mm512_setzero_ps();
    for (int64_t i = 0; i < kLanePanel; i += 16) {
      __m512 r[16];
      for (int j = 0; j < 16; ++j) {  // rows past a.rows were not staged: read as 0
        r[j] = 16 * h + j < real ? _mm512_load_ps(stage + (16 * h + j) * kStageLd + i)
                                 : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) {
        float* y = a.y + (ta + i + j) * a.ldy + row0 + 16 * h;
        const __m512 v = last && a.bias != nullptr ? _mm512_add_ps(r[j], bias) : r[j];
        if (stream) {
          _mm512_stream_ps(y, v);
        } else {
          _mm512_mask_storeu_ps(y, rm, v);
        }
      }
    }
  }
}

// `stream`: whole lines around the cache (a.y_stream, the last K block).
inline void stage_to_y(const NmGemmLaneArgs& a, int64_t row0, int64_t t_super, int64_t super,
                       const float* stage, bool stream) {
  const int64_t rows = std::min<int64_t>(kLaneRows, a.rows - row0);
  for (int64_t r = 0; r < rows; ++r) {
    float* y = a.y + (row0 + r) * a.ldy + t_super;
    for (int64_t i = 0; i < super; i += 16) {
      const __m512 v = _mm512_load_ps(stage + r * kStageLd + i);
      if (stream) {
        _mm512_stream_ps(y + i, v);
      } else {
        _mm512_storeu_ps(y + i, v);
      }
    }
  }
}

// The hybrid pass (a.x_panels or a.hybrid_pack set): one walk over the chunks of row block b feeds
// two disjoint output tiles. Permute-fed: RT tokens from tb x the block's 32 rows, as in tile<RT>.
// Load-fed: RA rows from row0 + ra0 x 16 · VA tokens from ta, each slot's value broadcast and its
// column's row of the token panel (`panel_c0` on) read as the FMA's memory operand (row = 16 c +
// lane, the same lane index the permute uses). Per slot 2 · RT permute-fed FMAs and RA · VA
// load-fed ones, against 16 permute-fed in tile<8>: bench_port_mix ran permute-fed FMAs alone at
// 2.7 G/s, 1:1 mixes with load-fed ones at 3.67 G/s (the register-fed peak) and 3.05-3.12 G/s
// with this slot's broadcast per 2 load-fed FMAs (a shuffle too: docs/performance.md, "the hybrid
// slot's ceiling").
// The load-fed tile starts from and ends in the super-tile's stage (t_super its first token), and
// so does the permute-fed one in the Yᵀ form; on a row-major Y the permute-fed tile is RT rows of Y
// and is read and written in place, as tile<RT> does (bias and streaming at the last K block; its
// lines prefetched in the first). Each output element is still the chain over its row's slots in
// order: the same bits.
template <int RT, int RA, int VA>
inline void hybrid_pass(const NmGemmLaneArgs& a, const NmGemmLaneLayout& lay, int64_t tb,
                        int64_t ta, int64_t b, int64_t ra0, int64_t c0, int64_t c1,
                        const float* panel_c0, float* stage, int64_t t_super) {
  const int64_t row0 = kLaneRows * b;
  const int64_t real = a.rows - row0;
  const bool from_zero = c0 == 0 && a.start_w == nullptr;  // else the stage holds the start
  __m512 acc0[RT];
  __m512 acc1[RT];
  if (from_zero) {
    for (int t = 0; t < RT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  } else if (a.y_transposed) {
    load_staged<RT>(stage + (tb - t_super), real, acc0, acc1);
  } else {
    load_rows<RT>(a, tb, row0, acc0, acc1);
  }
  const bool last = c1 == lay.chunks;
  const bool stream = a.y_stream && last && real >= kLaneRows;
  if (c0 == 0 && !a.y_transposed && !stream) prefetch_rows<RT>(a, tb, row0);
  __m512 acc[RA][VA];
  for (int r = 0; r < RA; ++r) {
    for (int v = 0; v < VA; ++v) {
      const int64_t t = ta + 16 * v;
      acc[r][v] = ra0 + r >= real || from_zero
                      ? _mm512_setzero_ps()
                      : _mm512_load_ps(stage + (ra0 + r) * kStageLd + (t - t_super));
    }
  }
  constexpr int64_t kSuper = RT * (kLaneRows / RA) + 16 * VA;
  static_assert(16 * VA == kLanePanel && kLaneHybridTokenBlock % kSuper == 0);
  const int64_t per_chunk = lay.slots_per_chunk;
  const int64_t full = std::min(c1, a.depth / kLaneChunk);
  for (int64_t c = c0; c < full; ++c) {
    __m512 x[RT];
    const float* v = a.values + lay.offset(b, c, 0);
    const int32_t* l = a.lanes + lay.offset(b, c, 0);
    const float* xt = panel_c0 + kLaneChunk * (c - c0) * kLanePanel;
    for (int t = 0; t < RT; ++t) x[t] = _mm512_loadu_ps(a.x + (tb + t) * a.ldx + kLaneChunk * c);
    for (int64_t s = 0; s < per_chunk; ++s) {
      const __m512 w0 = _mm512_load_ps(v + kLaneRows * s);
      const __m512 w1 = _mm512_load_ps(v + kLaneRows * s + 16);
      const __m512i i0 = _mm512_load_si512(l + kLaneRows * s);
      const __m512i i1 = _mm512_load_si512(l + kLaneRows * s + 16);
      for (int t = 0; t < RT; ++t) {
        acc0[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, x[t]), w0, acc0[t]);
        acc1[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, x[t]), w1, acc1[t]);
      }
      for (int r = 0; r < RA; ++r) {
        const __m512 wr = _mm512_set1_ps(v[kLaneRows * s + ra0 + r]);
        const float* xr = xt + l[kLaneRows * s + ra0 + r] * kLanePanel;
        for (int u = 0; u < VA; ++u)
          acc[r][u] = _mm512_fmadd_ps(wr, _mm512_loadu_ps(xr + 16 * u), acc[r][u]);
      }
    }
  }
  if (full < c1) {  // the partial last chunk: its real slots only
    const int64_t cols = a.depth - kLaneChunk * full;
    const auto km = static_cast<__mmask16>((1u << cols) - 1u);
    __m512 x[RT];
    for (int t = 0; t < RT; ++t) {
      x[t] = _mm512_maskz_loadu_ps(km, a.x + (tb + t) * a.ldx + kLaneChunk * full);
    }
    const float* v = a.values + lay.offset(b, full, 0);
    const int32_t* l = a.lanes + lay.offset(b, full, 0);
    const float* xt = panel_c0 + kLaneChunk * (full - c0) * kLanePanel;
    for (int64_t s = 0; s < cols / a.m * a.n; ++s) {
      const __m512 w0 = _mm512_load_ps(v + kLaneRows * s);
      const __m512 w1 = _mm512_load_ps(v + kLaneRows * s + 16);
      const __m512i i0 = _mm512_load_si512(l + kLaneRows * s);
      const __m512i i1 = _mm512_load_si512(l + kLaneRows * s + 16);
      for (int t = 0; t < RT; ++t) {
        acc0[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, x[t]), w0, acc0[t]);
        acc1[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, x[t]), w1, acc1[t]);
      }
      for (int r = 0; r < RA; ++r) {
        const __m512 wr = _mm512_set1_ps(v[kLaneRows * s + ra0 + r]);
        const float* xr = xt + l[kLaneRows * s + ra0 + r] * kLanePanel;
        for (int u = 0; u < VA; ++u)
          acc[r][u] = _mm512_fmadd_ps(wr, _mm512_loadu_ps(xr + 16 * u), acc[r][u]);
      }
    }
  }
  if (a.y_transposed) {
    store_staged<RT>(stage + (tb - t_super), real, acc0, acc1);
  } else {
    store_rows<RT>(a, tb, row0, last, stream, acc0, acc1);
  }
  for (int r = 0; r < RA; ++r) {
    if (ra0 + r >= real) continue;
    for (int u = 0; u < VA; ++u) {
      const int64_t t = ta + 16 * u;
      _mm512_store_ps(stage + (ra0 + r) * kStageLd + (t - t_super), acc[r][u]);
    }
  }
}

// Hybrid super-tile shapes (lane_hybrid_tokens): per row block, 32 / RA passes, each RT tokens
// permute-fed and RA rows x 16 · VA tokens load-fed.
// - RT 4 RA 4 VA 2 (32 + 32 tokens; 24 zmm of accumulators and operands) where a chunk holds 8 or
//   more slots: per slot 8 permute-fed and 8 load-fed FMAs against 8 permutes, 4 broadcasts, 4
//   operand loads, 4 lane loads and 8 panel loads (the permutes and broadcasts make it 3.09 G
//   FMAs/s at most; bench_port_mix's FmaMix/loads8/permutes8/weight_per2).
// - RT 6 RA 2 VA 2 (96 + 32 tokens; 28 zmm) at 1:4, whose chunks hold 4 slots: 12 + 4 FMAs per
//   slot; the narrow shape's 8 load-fed FMAs per slot made 1:4 slower (below).
// A standalone copy of the kernel, one thread, Zen 4, G zmm FMAs/s at 2:4 with every operand in
// L2 (T 128 x 2048 -> 32) / ms at T 8192 x 768 -> 3072, 8192 x 3072 -> 768 and 2048^3 (nm_wgrad's
// product): RT 4 RA 4 VA 2 2.96 / 222-225, 222-225, 99.7-100.2 ms; RT 6 RA 2 VA 2 2.72 / 231-236,
// 231-233, 101.8-101.9 ms; in L2 also RT 4 RA 4 VA 3 2.91, RT 5 RA 2 VA 2 2.64, RT 6 RA 4 VA 1
// 2.62, RT 4 RA 8 VA 1 2.56, RT 4 RA 2 VA 4 2.49, RT 2 RA 4 VA 2 1.97. At 1:4 (T 8192 x 768 ->
// 3072, 2048^3): RT 6 RA 2 VA 2 128.7 / 56.9 ms, RT 4 RA 4 VA 2 145.0 / 63.8; at 1:2 225.8 / 98.4
// against 230.4 / 101.4. Earlier, in nm_wgrad, ms at T 2048 2048 x 2048 / T 512 4096 x 4096
// (`bench_wgrad --benchmark_filter=Kernels`): RT 6 RA 2 VA 2 112.6 / 118.1; RT 6 RA 1 VA 2 124.6
// / 118.9; RT 6 RA 1 VA 4 126.3 / 119.6; RT 4 RA 2 VA 2 122.2 / 128.0; RT 4 RA 1 VA 2 128.7 /
// 135.3; permute-only tiles 118.8 / 123.4. Reading the load-fed rows of X in place (a 16 KB
// stride between slots) instead of from 32-token panels, at RT 4 RA 2 VA 2: 200.0 / 144.0.
// Chunks per K block of the hybrid pass: 128, as for tile<8>. 32 (a token block's Xᵀ rows, panels
// and slab all in L2) measured 274.3 -> 298.1 ms at T 8192 768 -> 3072 and 113.3 -> 131.1 ms at
// 2048^3 (nm_wgrad, one thread, 2:4). The forward on row-major Y, one thread, 2:4, ms at T 8192 x
// 768 -> 3072 / 8192 x 3072 -> 768 / 2048^3 / 512 x 4096 -> 4096 (`nmsparse bench kernels
// --gemms forward`, two runs): 128 chunks 225-239 / 229-245 / 99-106 / 99-104, 64 227-299 /
// 238-315 / 105-141 / 106-139, 32 283-292 / 246-261 / 115-117 / 115-122; 256 at the last two
// shapes 245-248 / 110-114 against 235-237 / 101-105. Super-tile by super-tile over all row blocks
// (each super-tile's X in L2, the operand's slabs from L3) instead of row block by row block:
// 229-231 / 233-238 / 111-112 / 113-114.
constexpr int64_t kHybridDepthChunks = 128;

// One super-tile of row block b over chunks [c0, c1): its stage from Y or the start term, the
// passes of hybrid_pass<RT, RA, VA>, and the stage back to Y. `panel_c0`: the load-fed tokens'
// panel rows from chunk c0 on (row 16 · (c - c0) + lane, 32 floats each).
// On a row-major Y the whole super-tile was staged at first (its permute-fed tiles transposed into
// the stage and back out again); their rows in place instead, one thread, 2:4, the kernel called
// directly at T 8192 x 768 -> 3072 (best 5 of 12 alternating runs / medians, ms): streamed
// 225.7 / 233.2 -> 222.1 / 225.1, not streamed with the same 256 tokens repeated 230.8 / 241.2 ->
// 226.2 / 239.1; at 1:4 within the noise (121.0-123.7 and 126.0-126.8).
template <int RT, int RA, int VA>
void hybrid_super_tile(const NmGemmLaneArgs& a, const NmGemmLaneLayout& lay, int64_t t0, int64_t b,
                       int64_t c0, int64_t c1, const float* panel_c0, float* stage) {
  constexpr int kPasses = static_cast<int>(kLaneRows) / RA;
  constexpr int64_t kSuper = RT * kPasses + 16 * VA;
  static_assert(kSuper <= kLaneHybridMaxTokens, "the stage holds kLaneHybridMaxTokens tokens");
  const int64_t row0 = kLaneRows * b;
  const bool last = c1 == lay.chunks;
  const int64_t ta = t0 + RT * kPasses;  // the load-fed tokens
  float* const load_fed = stage + RT * kPasses;
  if (c0 > 0) {
    a.y_transposed ? stage_from_y(a, row0, t0, kSuper, stage)
                   : stage_from_rows(a, row0, ta, load_fed);
  } else if (a.start_w != nullptr) {
    stage_start_term(a, row0, t0, kSuper, stage);
  }
  for (int p = 0; p < kPasses; ++p) {
    hybrid_pass<RT, RA, VA>(a, lay, t0 + RT * p, ta, b, RA * p, c0, c1, panel_c0, stage, t0);
  }
  if (a.y_transposed) {
    stage_to_y(a, row0, t0, kSuper, stage, a.y_stream && last);
  } else {
    stage_to_rows(a, row0, ta, load_fed, last);
  }
}

// The load-fed panels of row-major calls (NmGemmLaneArgs::hybrid_pack) for chunks [c0, c1): super-
// tile j of the call (tokens t_begin + j · super ..) its last kLanePanel tokens' columns, element
// (token i, column 16 c0 + k) at panels[(j · (c1 - c0) · 16 + k) · kLanePanel + i], through 16 x 16
// transposes. Columns past a.depth are not written (no slot reads them).
void pack_hybrid_panels(const NmGemmLaneArgs& a, int64_t t_begin, int64_t supers, int64_t super,
                        int64_t c0, int64_t c1, float* panels) {
  const int64_t k0 = kLaneChunk * c0;
  const int64_t k1 = std::min(kLaneChunk * c1, a.depth);
  for (int64_t j = 0; j < supers; ++j) {
    const int64_t ta = t_begin + (j + 1) * super - kLanePanel;
    float* dst = panels + j * (c1 - c0) * kLaneChunk * kLanePanel;
    for (int64_t k = k0; k < k1; k += 16) {
      const __mmask16 km = first_lanes(k1 - k);
      const int64_t cols = std::min<int64_t>(16, k1 - k);
      for (int64_t h = 0; h < kLanePanel; h += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = _mm512_maskz_loadu_ps(km, a.x + (ta + h + i) * a.ldx + k);
        transpose16(r);
        for (int64_t i = 0; i < cols; ++i) {
          _mm512_store_ps(dst + (k - k0 + i) * kLanePanel + h, r[i]);
        }
      }
    }
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
  const bool hybrid = a.x_panels != nullptr || a.hybrid_pack;
  const int64_t depth_chunks = hybrid ? kHybridDepthChunks : kDepthChunks;
  const int64_t super = lane_hybrid_tokens(a.n, a.m);
  const int64_t supers = hybrid ? (t_end - t_begin) / super : 0;
  float* own = nullptr;  // hybrid_pack: this call's panels, one K block at a time
  if (a.hybrid_pack && supers > 0) {
    thread_local AlignedBuffer<float> panels;
    const int64_t need = supers * std::min(depth_chunks, lay.chunks) * kLaneChunk * kLanePanel;
    if (panels.size() < need) panels.resize_for_overwrite(need);
    own = panels.data();
  }
  for (int64_t c0 = 0; c0 < lay.chunks; c0 += depth_chunks) {
    const int64_t c1 = c0 + depth_chunks < lay.chunks ? c0 + depth_chunks : lay.chunks;
    if (own != nullptr) pack_hybrid_panels(a, t_begin, supers, super, c0, c1, own);
    for (int64_t b = b_begin; b < b_end; ++b) {
      int64_t t0 = t_begin;
      alignas(64) float stage[kLaneRows * kStageLd];
      for (int64_t j = 0; j < supers; ++j, t0 += super) {
        const float* panel_c0 =
            own != nullptr ? own + j * (c1 - c0) * kLaneChunk * kLanePanel
                           : a.x_panels + (t0 / super * a.depth + kLaneChunk * c0) * kLanePanel;
        if (super == 64) {  // lane_hybrid_tokens' two shapes: 4 · 8 + 32, 6 · 16 + 32
          hybrid_super_tile<4, 4, 2>(a, lay, t0, b, c0, c1, panel_c0, stage);
        } else {
          hybrid_super_tile<6, 2, 2>(a, lay, t0, b, c0, c1, panel_c0, stage);
        }
      }
      for (; t0 + kTileTokens <= t_end; t0 += kTileTokens) {
        tile<kTileTokens>(a, lay, t0, b, c0, c1);
      }
      if (t0 < t_end)
        tile_tail<kTileTokens - 1>(a, lay, static_cast<int>(t_end - t0), t0, b, c0, c1);
    }
  }
  if (a.y_stream) _mm_sfence();  // streamed lines ordered before the caller's synchronisation
}

}  // namespace nms::detail
