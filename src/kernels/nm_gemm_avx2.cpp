// AVX2 + FMA kernel of nm_gemm: the AVX-512 scheme (nm_gemm_avx512.cpp) with 8-lane vectors. A
// micro-tile is 6 rows of A x 16 tokens (12 ymm accumulators; 16 registers in all), run over the
// four 16-token quarters of each 64-token panel; the same fused multiply-add chain per element, so
// results are bitwise those of the other levels.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_layout.h"

namespace nms::detail {
namespace {

// 8 x 8 transpose: r[i] lane j -> r[j] lane i.
inline void transpose8(__m256 r[8]) {
  __m256 a[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 b[8];
  for (int j = 0; j < 2; ++j) {
    b[4 * j] = _mm256_shuffle_ps(a[4 * j], a[4 * j + 2], 0x44);
    b[4 * j + 1] = _mm256_shuffle_ps(a[4 * j], a[4 * j + 2], 0xEE);
    b[4 * j + 2] = _mm256_shuffle_ps(a[4 * j + 1], a[4 * j + 3], 0x44);
    b[4 * j + 3] = _mm256_shuffle_ps(a[4 * j + 1], a[4 * j + 3], 0xEE);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(b[q], b[4 + q], 0x20);
    r[4 + q] = _mm256_permute2f128_ps(b[q], b[4 + q], 0x31);
  }
}

inline __m256i first_lanes8(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)), lane);
}

// panel[k][t] = x[t0 + t][k0 + k] for k < width_k, t < 64 (zero for t >= width_t).
void pack_panel(const NmGemmArgs& a, int64_t t0, int64_t width_t, int64_t k0, int64_t width_k,
                float* panel) {
  for (int64_t kb = 0; kb < width_k; kb += 8) {
    const __m256i km = first_lanes8(width_k - kb);
    for (int64_t tb = 0; tb < kNmGemmPanel; tb += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = tb + i < width_t ? _mm256_maskload_ps(a.x + (t0 + tb + i) * a.ldx + k0 + kb, km)
                                : _mm256_setzero_ps();
      }
      transpose8(r);
      const int64_t rows_k = width_k - kb < 8 ? width_k - kb : 8;
      for (int64_t i = 0; i < rows_k; ++i)
        _mm256_store_ps(panel + (kb + i) * kNmGemmPanel + tb, r[i]);
    }
  }
}

// 6 rows of A x 16 tokens (columns q0 .. q0 + 15 of the panel); yb[l][64].
template <bool kFirst>
inline void micro_tile(const float* entries, int64_t slots, const float* panel, float* yb) {
  __m256 acc[kNmGemmTileRows][2];
  for (int l = 0; l < kNmGemmTileRows; ++l) {
    for (int c = 0; c < 2; ++c) {
      acc[l][c] = kFirst ? _mm256_setzero_ps() : _mm256_load_ps(yb + l * kNmGemmPanel + 8 * c);
    }
  }
  for (int64_t s = 0; s < slots; ++s) {
    const float* e = entries + s * 2 * kNmGemmTileRows;
    for (int l = 0; l < kNmGemmTileRows; ++l) {
      const __m256 w = _mm256_broadcast_ss(e + 2 * l);
      int32_t offset;
      std::memcpy(&offset, e + 2 * l + 1, sizeof(offset));
      const float* p = panel + offset;
      for (int c = 0; c < 2; ++c) {
        acc[l][c] = _mm256_fmadd_ps(w, _mm256_load_ps(p + 8 * c), acc[l][c]);
      }
    }
  }
  for (int l = 0; l < kNmGemmTileRows; ++l) {
    for (int c = 0; c < 2; ++c) _mm256_store_ps(yb + l * kNmGemmPanel + 8 * c, acc[l][c]);
  }
}

// yb[r - r_begin][t] -> y[t0 + t][r] for t < width, r in [r_begin, r_end): 8 x 8 blocks.
void store_transposed(const NmGemmArgs& a, int64_t r_begin, int64_t r_end, int64_t t0,
                      int64_t width, const float* yb) {
  for (int64_t r0 = r_begin; r0 < r_end; r0 += 8) {
    const __m256i rm = first_lanes8(r_end - r0);
    const float* src = yb + (r0 - r_begin) * kNmGemmPanel;
    for (int64_t tb = 0; tb < width; tb += 8) {
      __m256 blk[8];
      for (int i = 0; i < 8; ++i) blk[i] = _mm256_load_ps(src + i * kNmGemmPanel + tb);
      transpose8(blk);
      const int64_t tokens = width - tb < 8 ? width - tb : 8;
      for (int64_t i = 0; i < tokens; ++i) {
        _mm256_maskstore_ps(a.y + (t0 + tb + i) * a.ldy + r0, rm, blk[i]);
      }
    }
  }
}

}  // namespace

void nm_gemm_avx2_pack_x(const NmGemmArgs& a, int64_t t0, int64_t width, float* xt) {
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m);
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    pack_panel(a, t0, width, b * lay.depth_block, lay.block_width(b),
               xt + b * lay.depth_block * kNmGemmPanel);
  }
}

void nm_gemm_avx2_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
                        int64_t tokens, const float* xt, float* scratch) {
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m);
  const int64_t panels = (tokens + kNmGemmPanel - 1) / kNmGemmPanel;
  const int64_t out_rows = nm_gemm_out_rows(tile1 - tile0);
  const int64_t yb_floats = out_rows * kNmGemmPanel;  // per panel: yb[out_rows][64]
  // xt == nullptr: the panels are packed here, one depth block at a time, after the output blocks.
  float* const own = xt == nullptr ? scratch + panels * yb_floats : nullptr;
  const int64_t panel_stride = own ? lay.depth_block * kNmGemmPanel : lay.panel_floats();
  const int64_t block_stride = own ? 0 : lay.depth_block * kNmGemmPanel;
  if (own) xt = own;
  for (int64_t q = 0; q < panels; ++q) {  // rows past the tiles, read by the transposes
    for (int64_t r = (tile1 - tile0) * kNmGemmTileRows; r < out_rows; ++r) {
      for (int c = 0; c < 8; ++c) {
        _mm256_store_ps(scratch + q * yb_floats + r * kNmGemmPanel + 8 * c, _mm256_setzero_ps());
      }
    }
  }
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    const int64_t first = lay.block_first_slot(b);
    const int64_t slots = lay.block_last_slot(b) - first;
    const float* block_entries = a.packed + lay.entry(tile0, first, 0);
    const int64_t tile_floats = slots * kNmGemmTileRows * 2;
    for (int64_t q = 0; own && q < panels; ++q) {
      const int64_t width = tokens - q * kNmGemmPanel;
      pack_panel(a, t0 + q * kNmGemmPanel, width < kNmGemmPanel ? width : kNmGemmPanel,
                 b * lay.depth_block, lay.block_width(b), own + q * panel_stride);
    }
    for (int64_t q = 0; q < panels; ++q) {
      const float* panel = xt + q * panel_stride + b * block_stride;
      float* yb = scratch + q * yb_floats;
      const int64_t width = tokens - q * kNmGemmPanel;
      for (int64_t tile = tile0; tile < tile1; ++tile) {
        const float* entries = block_entries + (tile - tile0) * tile_floats;
        float* out = yb + (tile - tile0) * kNmGemmTileRows * kNmGemmPanel;
        for (int64_t c = 0; c < width && c < kNmGemmPanel; c += 16) {
          if (b == 0) {
            micro_tile<true>(entries, slots, panel + c, out + c);
          } else {
            micro_tile<false>(entries, slots, panel + c, out + c);
          }
        }
      }
    }
  }
  const int64_t r_begin = tile0 * kNmGemmTileRows;
  const int64_t r_end = tile1 * kNmGemmTileRows < a.rows ? tile1 * kNmGemmTileRows : a.rows;
  for (int64_t q = 0; q < panels; ++q) {
    const int64_t width = tokens - q * kNmGemmPanel;
    store_transposed(a, r_begin, r_end, t0 + q * kNmGemmPanel,
                     width < kNmGemmPanel ? width : kNmGemmPanel, scratch + q * yb_floats);
  }
}

}  // namespace nms::detail
