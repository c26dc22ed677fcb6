// The AVX-512 decoder and micro-kernel of nm_wgrad (see wgrad_kernels.h). Same arithmetic as the
// scalar versions, element by element.
//
// Micro-kernel: kWgradRowTile (3) rows x NV (<= 8) zmm columns of accumulators; per slot and row
// one broadcast of the value (vbroadcastss from the packed tile), one offset load, and NV fused
// multiply-adds with the panel row at that offset (memory operands). The first slots also
// prefetch the next tile's C rows, so the read-modify-write of C per K-block does not wait on
// L2/L3. On the development Xeon a zmm FMA with a zmm load operand sustains ~4.4-4.7 G/s against
// 7.0 G/s register-only, so this mix (one 64-byte load per FMA) peaks near 110 useful GFLOP/s in
// L1 for every tile shape tried (6x64, 4x96, 3x128, 2x192); 3 x 128 halves the scalar loads per
// FMA of 6 x 64. The direct form (m = 4) is the same tile without the decoded tile: see
// tile_direct.
// Decoder: 16 slots per step; the index window (at most 13 bytes for 6-bit indices) is broadcast
// to the four 128-bit lanes and vpshufb moves each slot's two bytes into its dword, vpsrlvd and a
// mask extract the index, and the token offset adds the precomputed group start.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/first_lanes_avx512.h"
#include "kernels/transpose16_avx512.h"
#include "kernels/wgrad/wgrad_kernels.h"

namespace nms::detail {
namespace {

template <int NV>
inline void step(const float* vals, const int32_t* offs, int s, const char* base,
                 __m512 (&acc)[kWgradRowTile][NV]) {
#pragma GCC unroll 16
  for (int r = 0; r < kWgradRowTile; ++r) {
    const __m512 w = _mm512_set1_ps(vals[r * kWgradSlotStride + s]);
    const char* row = base + offs[r * kWgradSlotStride + s];
    // Materialise the row address: FMAs with a base + index memory operand are un-laminated into
    // two uops on Intel cores; one add per row keeps the four FMAs micro-fused.
    __asm__("" : "+r"(row));
    const auto* xr = reinterpret_cast<const float*>(row);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = _mm512_fmadd_ps(w, _mm512_load_ps(xr + 16 * v), acc[r][v]);
    }
  }
}

template <int NV>
inline __mmask16 last_vector_mask(const WgradTileArgs& t) {
  const int last = t.cols - 16 * (NV - 1);  // 1..16 columns in the last vector
  return static_cast<__mmask16>(last >= 16 ? 0xFFFFu : (1u << last) - 1u);
}

// The accumulators' start: C, or for a first block 0 / the decay term.
template <int NV>
inline void load_tile(const WgradTileArgs& t, __m512 (&acc)[kWgradRowTile][NV]) {
  const __mmask16 last_mask = last_vector_mask<NV>(t);
#pragma GCC unroll 16
  for (int r = 0; r < kWgradRowTile; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const __mmask16 k = v == NV - 1 ? last_mask : static_cast<__mmask16>(0xFFFFu);
      acc[r][v] = t.first || r >= t.rows ? _mm512_setzero_ps()
                                         : _mm512_maskz_loadu_ps(k, t.c + r * t.ldc + 16 * v);
      if (t.first && t.decay_w != nullptr && r < t.rows) {
        // decay · W where keep == 0: the same single multiply as wgrad_start.
        const __m512 w = _mm512_maskz_loadu_ps(k, t.decay_w + r * t.decay_ld_w + 16 * v);
        const __m128i keep = _mm_maskz_loadu_epi8(k, t.decay_keep + r * t.decay_ld_keep + 16 * v);
        const __mmask16 pruned = _mm_mask_cmpeq_epi8_mask(k, keep, _mm_setzero_si128());
        acc[r][v] = _mm512_maskz_mul_ps(pruned, _mm512_set1_ps(t.decay), w);
      }
    }
  }
}

template <int NV>
inline void store_tile(const WgradTileArgs& t, const __m512 (&acc)[kWgradRowTile][NV]) {
  const __mmask16 last_mask = last_vector_mask<NV>(t);
#pragma GCC unroll 16
  for (int r = 0; r < kWgradRowTile; ++r) {
    if (r >= t.rows) break;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const __mmask16 k = v == NV - 1 ? last_mask : static_cast<__mmask16>(0xFFFFu);
      _mm512_mask_storeu_ps(t.c + r * t.ldc + 16 * v, k, acc[r][v]);
    }
  }
}

// Prefetches row `row` of the next tile's C (if it has one) into L1.
template <int NV>
inline void prefetch_next_c(const WgradTileArgs& t, int row) {
  if (t.next_c == nullptr || row >= t.next_rows) return;
  const auto* pf = reinterpret_cast<const char*>(t.next_c + row * t.ldc);
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) _mm_prefetch(pf + 64 * v, _MM_HINT_T0);
}

template <int NV>
void tile(const WgradTileArgs& t) {
  __m512 acc[kWgradRowTile][NV];
  load_tile<NV>(t, acc);
  const auto* base = reinterpret_cast<const char*>(t.panel);
  int s = 0;
  if (t.next_c != nullptr) {
    const int pre = t.slots < t.next_rows ? t.slots : t.next_rows;
    for (; s < pre; ++s) {
      prefetch_next_c<NV>(t, s);
      step<NV>(t.vals, t.offs, s, base, acc);
    }
  }
  for (; s < t.slots; ++s) step<NV>(t.vals, t.offs, s, base, acc);
  store_tile<NV>(t, acc);
}

// The direct form (m = 4, N slots per group): per group g the panel rows of its 4 tokens start
// at panel + g · 4 rows; each slot takes its 2-bit index from the row's index word (and, shift,
// add: integer ports, which the load-bound loop leaves idle) instead of a decoded offset, and its
// value straight from the compressed row. Against the decoded tile this drops the decoder (15 %
// of kernel A's time at T 6400 x 192 -> 768 under perf) and one scalar load per slot and row:
// 16.1-18.6 -> 13.5 ms there (1.15-1.26x -> 1.49x of OpenBLAS; Zen 4, one thread,
// `bench_wgrad --benchmark_filter='BM_NmWgrad/0/5/1/0'`).
template <int NV, int N>
void tile_direct(const WgradTileArgs& t) {
  alignas(64) static const float kZeros[kWgradDirectMaxSlots] = {};
  __m512 acc[kWgradRowTile][NV];
  load_tile<NV>(t, acc);
  const float* vals[kWgradRowTile];
  uint64_t words[kWgradRowTile];
#pragma GCC unroll 16
  for (int r = 0; r < kWgradRowTile; ++r) {
    vals[r] = r < t.rows ? t.row_values[r] : kZeros;
    words[r] = r < t.rows ? t.row_indices[r] : 0;
  }
  constexpr int kRowBytes = kWgradPanelBytes;
  const auto* group_rows = reinterpret_cast<const char*>(t.panel);
  const int groups = t.slots / N;
  for (int g = 0; g < groups; ++g, group_rows += 4 * kRowBytes) {
    if (g < kWgradRowTile) prefetch_next_c<NV>(t, g);
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) {
#pragma GCC unroll 16
      for (int r = 0; r < kWgradRowTile; ++r) {
        const __m512 w = _mm512_set1_ps(vals[r][g * N + j]);
        const char* row = group_rows + static_cast<size_t>(words[r] & 3u) * kRowBytes;
        __asm__("" : "+r"(row));  // base + displacement operands, as in step()
        const auto* xr = reinterpret_cast<const float*>(row);
        words[r] >>= 2;
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) {
          acc[r][v] = _mm512_fmadd_ps(w, _mm512_load_ps(xr + 16 * v), acc[r][v]);
        }
      }
    }
  }
  // Rows of the next tile not prefetched yet (fewer groups than rows).
  for (int g = groups; g < kWgradRowTile; ++g) prefetch_next_c<NV>(t, g);
  store_tile<NV>(t, acc);
}

template <int N>
void tile_direct_for_cols(const WgradTileArgs& t) {
  switch ((t.cols + 15) / 16) {
    case 1:
      return tile_direct<1, N>(t);
    case 2:
      return tile_direct<2, N>(t);
    case 3:
      return tile_direct<3, N>(t);
    case 4:
      return tile_direct<4, N>(t);
    case 5:
      return tile_direct<5, N>(t);
    case 6:
      return tile_direct<6, N>(t);
    case 7:
      return tile_direct<7, N>(t);
    default:
      return tile_direct<8, N>(t);
  }
}

}  // namespace

bool wgrad_decode_avx512(const WgradDecodeArgs& a, float* vals, int32_t* offs) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i m = _mm512_set1_epi32(a.m);
  const __m512i index_mask = _mm512_set1_epi32(static_cast<int>((1u << a.bits) - 1u));
  const __m512i lane_bits = _mm512_mullo_epi32(iota, _mm512_set1_epi32(a.bits));
  __mmask16 bad = 0;
  for (int s = 0; s < a.slots; s += 16) {
    const int count = a.slots - s < 16 ? a.slots - s : 16;
    const auto k = static_cast<__mmask16>(count == 16 ? 0xFFFFu : (1u << count) - 1u);
    _mm512_mask_storeu_ps(vals + s, k, _mm512_maskz_loadu_ps(k, a.values + s));
    __m512i idx = _mm512_setzero_si512();
    if (a.bits > 0) {
      const int64_t start = (a.s0 + s) * a.bits;
      const int64_t byte = start >> 3;
      const int64_t avail = a.row_bytes - byte;  // >= 1: slot s0 + s exists
      const auto kb = static_cast<__mmask16>(avail >= 16 ? 0xFFFFu : (1u << avail) - 1u);
      const __m512i window = _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(kb, a.indices + byte));
      const __m512i lb =
          _mm512_add_epi32(lane_bits, _mm512_set1_epi32(static_cast<int>(start & 7)));
      const __m512i ctrl = _mm512_add_epi32(
          _mm512_mullo_epi32(_mm512_srli_epi32(lb, 3), _mm512_set1_epi32(0x01010101)),
          _mm512_set1_epi32(0x03020100));
      const __m512i word = _mm512_shuffle_epi8(window, ctrl);
      idx = _mm512_and_si512(_mm512_srlv_epi32(word, _mm512_and_si512(lb, _mm512_set1_epi32(7))),
                             index_mask);
    }
    bad |= _mm512_mask_cmpge_epi32_mask(k, idx, m);
    const __m512i token = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, a.group_token + s), idx);
    _mm512_mask_storeu_epi32(offs + s, k,
                             _mm512_mullo_epi32(token, _mm512_set1_epi32(kWgradPanelBytes)));
  }
  return bad == 0;
}

// Per 16 slots and 16 rows: 16 loads, one in-register 16 x 16 transpose, 16 streamed stores, for
// the values and again for the lanes (the lane form, 8 bytes per slot, is far larger than L2 at
// training shapes: 100 MB for dY 8192 x 3072 at 2:4). With the prefetch of wgrad_lanes.cpp, the
// lane form of that dY took 13-23 ms against 40-57 ms for the scalar copy (one thread, Zen 4).
void wgrad_lane_piece_avx512(const float* vals, const int32_t* offs, int slots, float* out_values,
                             int32_t* out_lanes) {
  static_assert(kWgradPanelBytes == 512);
  const __m512i chunk_mask = _mm512_set1_epi32(15);
  for (int s0 = 0; s0 < slots; s0 += 16) {
    const int count = slots - s0 < 16 ? slots - s0 : 16;
    const auto k = static_cast<__mmask16>(count == 16 ? 0xFFFFu : (1u << count) - 1u);
    for (int h = 0; h < kLaneRows / 16; ++h) {  // rows 16h .. 16h + 15
      __m512 v[16];
      __m512 o[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t at = static_cast<int64_t>(16 * h + i) * kWgradMaxBlockSlots + s0;
        v[i] = _mm512_maskz_loadu_ps(k, vals + at);
        const __m512i off = _mm512_maskz_loadu_epi32(k, offs + at);
        o[i] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_srli_epi32(off, 9), chunk_mask));
      }
      transpose16(v);
      transpose16(o);
      for (int s = 0; s < count; ++s) {
        const int64_t at = static_cast<int64_t>(s0 + s) * kLaneRows + 16 * h;
        _mm512_stream_ps(out_values + at, v[s]);
        _mm512_stream_ps(reinterpret_cast<float*>(out_lanes + at), o[s]);
      }
    }
  }
  _mm_sfence();  // the streamed lines ordered before the caller's synchronisation
}

void wgrad_split_x_avx512(const WgradSplitXArgs& a, int64_t t_begin, int64_t t_end) {
  const int64_t supers = a.in / a.super;
  const int64_t fed = a.super - kLanePanel;  // permute-fed features per super-tile
  for (int64_t t0 = t_begin; t0 < t_end; t0 += 16) {
    const int64_t real = std::min<int64_t>(16, t_end - t0);
    // Features [f0, f0 + width), width <= 16, of the 16 tokens from t0 into x_t.
    const auto transpose_features = [&](int64_t f0, int64_t width) {
      const __mmask16 km = first_lanes(width);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] =
            i < real ? _mm512_maskz_loadu_ps(km, a.x + (t0 + i) * a.ldx + f0) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int64_t j = 0; j < width; ++j) {
        float* dst = a.x_t + (f0 + j) * a.ld_t + t0;
        a.stream ? _mm512_stream_ps(dst, r[j]) : _mm512_store_ps(dst, r[j]);
      }
    };
    for (int64_t p = 0; p < supers; ++p) {
      for (int64_t f = 0; f < fed; f += 16) transpose_features(p * a.super + f, 16);
      const float* src = a.x + t0 * a.ldx + p * a.super + fed;
      float* dst = a.panels + (p * a.tokens + t0) * kLanePanel;
      for (int64_t i = 0; i < real; ++i, src += a.ldx, dst += kLanePanel) {
        for (int64_t v = 0; v < kLanePanel; v += 16) {
          const __m512 x = _mm512_loadu_ps(src + v);
          a.stream ? _mm512_stream_ps(dst + v, x) : _mm512_store_ps(dst + v, x);
        }
      }
    }
    for (int64_t f = supers * a.super; f < a.in; f += 16) {
      transpose_features(f, std::min<int64_t>(16, a.in - f));
    }
  }
  if (a.stream) _mm_sfence();  // the streamed lines ordered before the caller's synchronisation
}

void wgrad_tile_m4_avx512(const WgradTileArgs& t) {
  static_assert(kWgradPanel == 128, "tile_direct_for_cols covers 8 vectors");
  if (t.n == 1) return tile_direct_for_cols<1>(t);
  return tile_direct_for_cols<2>(t);
}

void wgrad_tile_avx512(const WgradTileArgs& t) {
  constexpr int kVectors = kWgradPanel / 16;
  switch ((t.cols + 15) / 16) {
    case 1:
      return tile<1>(t);
    case 2:
      return tile < kVectors >= 2 ? 2 : 1 > (t);
    case 3:
      return tile < kVectors >= 3 ? 3 : 1 > (t);
    case 4:
      return tile < kVectors >= 4 ? 4 : 1 > (t);
    case 5:
      return tile < kVectors >= 5 ? 5 : 1 > (t);
    case 6:
      return tile < kVectors >= 6 ? 6 : 1 > (t);
    case 7:
      return tile < kVectors >= 7 ? 7 : 1 > (t);
    case 8:
      return tile < kVectors >= 8 ? 8 : 1 > (t);
    case 9:
      return tile < kVectors >= 9 ? 9 : 1 > (t);
    case 10:
      return tile < kVectors >= 10 ? 10 : 1 > (t);
    case 11:
      return tile < kVectors >= 11 ? 11 : 1 > (t);
    default:
      return tile<kVectors>(t);
  }
}

}  // namespace nms::detail
