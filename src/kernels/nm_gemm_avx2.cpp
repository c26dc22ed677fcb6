// AVX2 + FMA kernel of nm_gemm: the AVX-512 scheme (nm_gemm_avx512.cpp, with its weight-gradient
// form and start term) with 8-lane vectors. With 16 registers the micro-kernel takes one row of A
// at a time over a whole 64-token panel: per kept slot 1 broadcast, 1 offset load and 8 FMAs with
// memory operands (10 loads per 8 FMAs; Zen 2 issues two loads a cycle). The former 6 rows x 16
// tokens (4 loads per 2 FMAs) ran at 0.75x of OpenBLAS, forward 2:4 at 2048^3, one thread, Zen 2;
// this one at 1.11x; 4 vectors per row (32 tokens, 6 loads per 4 FMAs) 0.85x. Each element is the
// same fused multiply-add chain, so results are bitwise those of the other levels.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_layout.h"
#include "kernels/transpose8_avx2.h"

namespace nms::detail {
namespace {

inline __m256i first_lanes8(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)), lane);
}

// panel[k][t] = x[t0 + t][k0 + k] for k < width_k, t < 64 (zero for t >= width_t).
void pack_panel(const NmGemmArgs& a, int64_t t0, int64_t width_t, int64_t k0, int64_t width_k,
                float* panel) {
  if (a.transposed) {  // x is [depth, tokens]: a panel row is a piece of an x row
    for (int64_t k = 0; k < width_k; ++k) {
      const float* src = a.x + (k0 + k) * a.ldx + t0;
      for (int64_t c = 0; c < kNmGemmPanel; c += 8) {
        const __m256 v = width_t - c >= 8 ? _mm256_loadu_ps(src + c)
                                          : _mm256_maskload_ps(src + c, first_lanes8(width_t - c));
        _mm256_store_ps(panel + k * kNmGemmPanel + c, v);
      }
    }
    return;
  }
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

// One row of A (its entries every 12 floats from `entries`) x the first 8 · kVectors tokens of the
// panel: yb[0 .. 8 · kVectors) of that row. Per kept slot 1 broadcast + 1 offset load +
// kVectors memory-operand FMAs.
template <bool kFirst, int kVectors>
inline void micro_row(const float* entries, int64_t slots, const float* panel, float* yb) {
  __m256 acc[kVectors];
  for (int c = 0; c < kVectors; ++c) {
    acc[c] = kFirst ? _mm256_setzero_ps() : _mm256_load_ps(yb + 8 * c);
  }
  for (int64_t s = 0; s < slots; ++s) {
    const float* e = entries + s * 2 * kNmGemmTileRows;
    const __m256 w = _mm256_broadcast_ss(e);
    int32_t offset;
    std::memcpy(&offset, e + 1, sizeof(offset));
    const float* p = panel + offset;
    for (int c = 0; c < kVectors; ++c) {
      acc[c] = _mm256_fmadd_ps(w, _mm256_load_ps(p + 8 * c), acc[c]);
    }
  }
  for (int c = 0; c < kVectors; ++c) _mm256_store_ps(yb + 8 * c, acc[c]);
}

// The 6 rows of a tile x the panel's `width` tokens (half a panel when width <= 32); yb[l][64].
template <bool kFirst>
inline void micro_tile(const float* entries, int64_t slots, const float* panel, float* yb,
                       int64_t width) {
  for (int l = 0; l < kNmGemmTileRows; ++l) {
    if (width > 32) {
      micro_row<kFirst, 8>(entries + 2 * l, slots, panel, yb + l * kNmGemmPanel);
    } else {
      micro_row<kFirst, 4>(entries + 2 * l, slots, panel, yb + l * kNmGemmPanel);
    }
  }
}

// yb[r - r_begin][t] -> y[t0 + t][r] for t < width, r in [r_begin, r_end): 8 x 8 blocks.
void store_transposed(const NmGemmArgs& a, int64_t r_begin, int64_t r_end, int64_t t0,
                      int64_t width, const float* yb) {
  if (a.transposed) {  // y is [rows, tokens]: a row of the block is a piece of a y row
    for (int64_t r = r_begin; r < r_end; ++r) {
      const float* src = yb + (r - r_begin) * kNmGemmPanel;
      float* dst = a.y + r * a.ldy + t0;
      for (int64_t c = 0; c < width; c += 8) {
        if (width - c >= 8) {
          _mm256_storeu_ps(dst + c, _mm256_load_ps(src + c));
        } else {
          _mm256_maskstore_ps(dst + c, first_lanes8(width - c), _mm256_load_ps(src + c));
        }
      }
    }
    return;
  }
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
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m, a.depth_block);
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    pack_panel(a, t0, width, b * lay.depth_block, lay.block_width(b),
               xt + b * lay.depth_block * kNmGemmPanel);
  }
}

void nm_gemm_avx2_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
                        int64_t tokens, const float* xt, float* scratch) {
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m, a.depth_block);
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
  // With a start term the chains of block 0 start from it instead of from 0: the output blocks
  // are filled with it first and every block accumulates onto them.
  const bool start_term = a.start_w != nullptr;
  if (start_term) {
    const int64_t r_end = tile1 * kNmGemmTileRows < a.rows ? tile1 * kNmGemmTileRows : a.rows;
    const __m256 lambda = _mm256_set1_ps(a.start_lambda);
    for (int64_t r = tile0 * kNmGemmTileRows; r < tile1 * kNmGemmTileRows; ++r) {
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t tq = t0 + q * kNmGemmPanel;
        // Rows past A and tokens past the call start from 0 (they are never stored).
        const int64_t width = r < r_end ? std::min(tokens - q * kNmGemmPanel, kNmGemmPanel) : 0;
        float* out = scratch + q * yb_floats + (r - tile0 * kNmGemmTileRows) * kNmGemmPanel;
        const float* w = a.start_w + r * a.start_ldw + tq;
        const uint8_t* keep = a.start_keep + r * a.start_ldkeep + tq;
        int64_t t = 0;
        for (; t + 8 <= width; t += 8) {
          int64_t bytes;
          std::memcpy(&bytes, keep + t, sizeof(bytes));
          const __m256i k = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
          const __m256 pruned = _mm256_castsi256_ps(_mm256_cmpeq_epi32(k, _mm256_setzero_si256()));
          const __m256 v = _mm256_mul_ps(lambda, _mm256_loadu_ps(w + t));
          _mm256_store_ps(out + t, _mm256_and_ps(pruned, v));
        }
        for (; t < kNmGemmPanel; ++t) {
          out[t] = t < width && keep[t] == 0 ? a.start_lambda * w[t] : 0.0f;
        }
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
        if (b == 0 && !start_term) {
          micro_tile<true>(entries, slots, panel, out, width);
        } else {
          micro_tile<false>(entries, slots, panel, out, width);
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
