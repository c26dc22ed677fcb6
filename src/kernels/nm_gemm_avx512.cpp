// AVX-512 kernel of nm_gemm (see nm_gemm.h for the scheme, nm_gemm_layout.h for the operand).
#include "kernels/nm_gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/first_lanes_avx512.h"
#include "kernels/nm_gemm_layout.h"
#include "kernels/transpose16_avx512.h"

namespace nms::detail {
namespace {

// panel[k][t] = x[t0 + t][k0 + k] for k < width_k, t < 64 (zero for t >= width_t).
void pack_panel(const NmGemmArgs& a, int64_t t0, int64_t width_t, int64_t k0, int64_t width_k,
                float* panel) {
  if (a.transposed) {  // x is [depth, tokens]: a panel row is a piece of an x row
    for (int64_t k = 0; k < width_k; ++k) {
      const float* src = a.x + (k0 + k) * a.ldx + t0;
      for (int c = 0; c < 4; ++c) {
        const __m512 v = _mm512_maskz_loadu_ps(first_lanes(width_t - 16 * c), src + 16 * c);
        _mm512_store_ps(panel + k * kNmGemmPanel + 16 * c, v);
      }
    }
    return;
  }
  for (int64_t kb = 0; kb < width_k; kb += 16) {
    const __mmask16 km = first_lanes(width_k - kb);
    for (int64_t tb = 0; tb < kNmGemmPanel; tb += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = tb + i < width_t ? _mm512_maskz_loadu_ps(km, a.x + (t0 + tb + i) * a.ldx + k0 + kb)
                                : _mm512_setzero_ps();
      }
      transpose16(r);
      const int64_t rows_k = width_k - kb < 16 ? width_k - kb : 16;
      for (int64_t i = 0; i < rows_k; ++i) {
        _mm512_store_ps(panel + (kb + i) * kNmGemmPanel + tb, r[i]);
      }
    }
  }
}

// One micro-tile: 6 rows of A x 64 tokens over `slots` entries (12 floats each); yb[l][64].
// kShared: the 6 rows keep the same column at every slot, so each panel row is loaded once and
// feeds the 24 FMAs from registers. Either way the same fused multiply-add chain per element.
template <bool kFirst, bool kShared>
inline void micro_tile(const float* entries, int64_t slots, const float* panel, float* yb) {
  __m512 acc[kNmGemmTileRows][4];
  for (int l = 0; l < kNmGemmTileRows; ++l) {
    for (int c = 0; c < 4; ++c) {
      acc[l][c] = kFirst ? _mm512_setzero_ps() : _mm512_load_ps(yb + l * kNmGemmPanel + 16 * c);
    }
  }
  for (int64_t s = 0; s < slots; ++s) {
    const float* e = entries + s * 2 * kNmGemmTileRows;
    if constexpr (kShared) {
      int32_t offset;
      std::memcpy(&offset, e + 1, sizeof(offset));
      __m512 xv[4];
      for (int c = 0; c < 4; ++c) xv[c] = _mm512_load_ps(panel + offset + 16 * c);
      for (int l = 0; l < kNmGemmTileRows; ++l) {
        const __m512 w = _mm512_set1_ps(e[2 * l]);
        for (int c = 0; c < 4; ++c) acc[l][c] = _mm512_fmadd_ps(w, xv[c], acc[l][c]);
      }
    } else {
      for (int l = 0; l < kNmGemmTileRows; ++l) {
        const __m512 w = _mm512_set1_ps(e[2 * l]);
        int32_t offset;
        std::memcpy(&offset, e + 2 * l + 1, sizeof(offset));
        const float* p = panel + offset;
        for (int c = 0; c < 4; ++c) {
          acc[l][c] = _mm512_fmadd_ps(w, _mm512_load_ps(p + 16 * c), acc[l][c]);
        }
      }
    }
  }
  for (int l = 0; l < kNmGemmTileRows; ++l) {
    for (int c = 0; c < 4; ++c) _mm512_store_ps(yb + l * kNmGemmPanel + 16 * c, acc[l][c]);
  }
}

// Half a tile, 128 tokens wide: rows row0 .. row0 + 2 of a 6-row tile over the token panels pa and
// pb (64 tokens each: ya / yb their output blocks), slots [s0, s1). Per slot and row one broadcast,
// one offset load and 8 fused multiply-adds with memory operands: 10 loads per 8 FMAs against 6
// per 4 in micro_tile. Zen 4 aside, this Xeon issues two 64-byte loads a cycle and a zmm FMA with
// a load operand sustains ~4.8 G/s (7.5 G/s register-only), so the load count is the bound:
// 4.8 · 8 / 10 = 3.9 G FMAs/s here against 4.8 · 4 / 6 = 3.2 G/s. Each element keeps micro_tile's
// fused multiply-add chain, slot by slot.
template <bool kFirst>
inline void micro_tile_wide(const float* entries, int64_t s0, int64_t s1, int row0, const float* pa,
                            const float* pb, float* ya, float* yb) {
  __m512 acc[3][8];
  for (int l = 0; l < 3; ++l) {
    for (int c = 0; c < 4; ++c) {
      const int64_t at = (row0 + l) * kNmGemmPanel + 16 * c;
      acc[l][c] = kFirst ? _mm512_setzero_ps() : _mm512_load_ps(ya + at);
      acc[l][4 + c] = kFirst ? _mm512_setzero_ps() : _mm512_load_ps(yb + at);
    }
  }
  for (int64_t s = s0; s < s1; ++s) {
    const float* e = entries + s * 2 * kNmGemmTileRows + 2 * row0;
    for (int l = 0; l < 3; ++l) {
      const __m512 w = _mm512_set1_ps(e[2 * l]);
      int32_t offset;
      std::memcpy(&offset, e + 2 * l + 1, sizeof(offset));
      const float* p = pa + offset;
      const float* q = pb + offset;
      // Materialised addresses keep the FMAs' memory operands base + displacement (a base +
      // index operand is un-laminated into two uops on Intel cores).
      __asm__("" : "+r"(p), "+r"(q));
      for (int c = 0; c < 4; ++c)
        acc[l][c] = _mm512_fmadd_ps(w, _mm512_load_ps(p + 16 * c), acc[l][c]);
      for (int c = 0; c < 4; ++c) {
        acc[l][4 + c] = _mm512_fmadd_ps(w, _mm512_load_ps(q + 16 * c), acc[l][4 + c]);
      }
    }
  }
  for (int l = 0; l < 3; ++l) {
    for (int c = 0; c < 4; ++c) {
      const int64_t at = (row0 + l) * kNmGemmPanel + 16 * c;
      _mm512_store_ps(ya + at, acc[l][c]);
      _mm512_store_ps(yb + at, acc[l][4 + c]);
    }
  }
}

// yb[r - r_begin][t] -> y[t0 + t][r] for t < width, r in [r_begin, r_end): 16 x 16 blocks
// (r_begin a multiple of 48), written around the cache when a block row is a whole aligned line
// (Y is T x R floats, larger than the caches for training shapes; plain stores read every line
// first: 9 % of the GEMM at T 8192, 768 -> 3072).
void store_transposed(const NmGemmArgs& a, int64_t r_begin, int64_t r_end, int64_t t0,
                      int64_t width, const float* yb) {
  if (a.transposed) {  // y is [rows, tokens]: a row of the block is a piece of a y row
    for (int64_t r = r_begin; r < r_end; ++r) {
      const float* src = yb + (r - r_begin) * kNmGemmPanel;
      float* dst = a.y + r * a.ldy + t0;
      const bool whole = width == kNmGemmPanel && (reinterpret_cast<uintptr_t>(dst) & 63) == 0;
      for (int64_t c = 0; c < width; c += 16) {
        if (whole) {
          _mm512_stream_ps(dst + c, _mm512_load_ps(src + c));
        } else {
          _mm512_mask_storeu_ps(dst + c, first_lanes(width - c), _mm512_load_ps(src + c));
        }
      }
    }
    return;
  }
  for (int64_t r0 = r_begin; r0 < r_end; r0 += 16) {
    const __mmask16 rm = first_lanes(r_end - r0);
    const float* src = yb + (r0 - r_begin) * kNmGemmPanel;
    for (int64_t tb = 0; tb < width; tb += 16) {
      __m512 blk[16];
      for (int i = 0; i < 16; ++i) blk[i] = _mm512_load_ps(src + i * kNmGemmPanel + tb);
      transpose16(blk);
      const int64_t tokens = width - tb < 16 ? width - tb : 16;
      for (int64_t i = 0; i < tokens; ++i) {
        float* dst = a.y + (t0 + tb + i) * a.ldy + r0;
        if (rm == 0xFFFF && (reinterpret_cast<uintptr_t>(dst) & 63) == 0) {
          _mm512_stream_ps(dst, blk[i]);  // whole line: no read for ownership
        } else {
          _mm512_mask_storeu_ps(dst, rm, blk[i]);
        }
      }
    }
  }
}

}  // namespace

void nm_gemm_avx512_pack_x(const NmGemmArgs& a, int64_t t0, int64_t width, float* xt) {
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m, a.depth_block);
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    pack_panel(a, t0, width, b * lay.depth_block, lay.block_width(b),
               xt + b * lay.depth_block * kNmGemmPanel);
  }
}

void nm_gemm_avx512_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
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
      for (int c = 0; c < 4; ++c) {
        _mm512_store_ps(scratch + q * yb_floats + r * kNmGemmPanel + 16 * c, _mm512_setzero_ps());
      }
    }
  }
  // With a start term the chains of block 0 start from it instead of from 0: the output blocks
  // are filled with it first and every block accumulates onto them.
  if (a.start_w != nullptr) {
    const int64_t r_end = tile1 * kNmGemmTileRows < a.rows ? tile1 * kNmGemmTileRows : a.rows;
    const __m512 lambda = _mm512_set1_ps(a.start_lambda);
    // Row by row (each a contiguous piece of W and of the mask for all the group's panels).
    for (int64_t r = tile0 * kNmGemmTileRows; r < tile1 * kNmGemmTileRows; ++r) {
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t tq = t0 + q * kNmGemmPanel;
        const int64_t width = tokens - q * kNmGemmPanel;
        float* out = scratch + q * yb_floats + (r - tile0 * kNmGemmTileRows) * kNmGemmPanel;
        for (int c = 0; c < 4; ++c) {
          // Rows past A and tokens past the call start from 0 (they are never stored).
          const __mmask16 k = r < r_end ? first_lanes(width - 16 * c) : 0;
          const __m512 w = _mm512_maskz_loadu_ps(k, a.start_w + r * a.start_ldw + tq + 16 * c);
          const __m128i keep =
              _mm_maskz_loadu_epi8(k, a.start_keep + r * a.start_ldkeep + tq + 16 * c);
          const __mmask16 pruned = _mm_mask_cmpeq_epi8_mask(k, keep, _mm_setzero_si128());
          _mm512_store_ps(out + 16 * c, _mm512_maskz_mul_ps(pruned, lambda, w));
        }
      }
    }
  }
  const bool start_term = a.start_w != nullptr;
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    const int64_t first = lay.block_first_slot(b);
    const int64_t slots = lay.block_last_slot(b) - first;
    const float* block_entries = a.packed + lay.entry(tile0, first, 0);
    const int64_t tile_floats = slots * kNmGemmTileRows * 2;
    const uint8_t* shared = a.shared + b * lay.tiles;
    for (int64_t q = 0; own && q < panels; ++q) {
      const int64_t width = tokens - q * kNmGemmPanel;
      pack_panel(a, t0 + q * kNmGemmPanel, width < kNmGemmPanel ? width : kNmGemmPanel,
                 b * lay.depth_block, lay.block_width(b), own + q * panel_stride);
    }
    // Slots [0, split) cover about the first half of the block's columns: a pair of panels is
    // walked in two halves, so each half's rows of both panels (2 x 16 KB at 2:4) stay in L1
    // while the chunk's tiles go past them.
    const int64_t split = slots / a.n / 2 * a.n;
    for (int64_t q = 0; q < panels;) {
      const bool pair = a.panel_pairs && q + 1 < panels;
      const int64_t step = pair ? 2 : 1;
      const float* panel = xt + q * panel_stride + b * block_stride;
      float* yq = scratch + q * yb_floats;
      // The next shared panels (this block's next token panels, else the next block's first) are
      // prefetched into L2 a few lines per tile: the first tiles over them would otherwise wait
      // on memory (+2-5 % at T 8192, 768 -> 3072; within noise at 512, 4096 -> 4096). Panels
      // packed here are in L2 already.
      const bool next_q = q + step < panels;
      const char* next = reinterpret_cast<const char*>(next_q ? panel + step * panel_stride
                                                              : xt + (b + 1) * block_stride);
      const int64_t next_panels = next_q ? std::min<int64_t>(2, panels - q - step) : 1;
      const int64_t next_lines = !own && (next_q || b + 1 < lay.depth_blocks)
                                     ? lay.block_width(next_q ? b : b + 1) * 4
                                     : 0;
      const int64_t passes = pair ? 2 : 1;
      const int64_t lines_per_tile =
          (next_lines * next_panels + passes * (tile1 - tile0) - 1) / (passes * (tile1 - tile0));
      int64_t line = 0;
      auto prefetch_next = [&] {
        for (int64_t i = 0; i < lines_per_tile && line < next_lines * next_panels; ++i, ++line) {
          const int64_t pl = line / next_lines;  // which of the next panels
          _mm_prefetch(next + pl * panel_stride * 4 + (line % next_lines) * 64, _MM_HINT_T1);
        }
      };
      for (int64_t h = 0; h < passes; ++h) {
        for (int64_t tile = tile0; tile < tile1; ++tile) {
          prefetch_next();
          const float* entries = block_entries + (tile - tile0) * tile_floats;
          const int64_t row_at = (tile - tile0) * kNmGemmTileRows * kNmGemmPanel;
          if (!pair || shared[tile]) {
            if (h == 1) continue;  // a whole panel per call
            for (int64_t k = 0; k < step; ++k) {
              float* out = yq + k * yb_floats + row_at;
              const float* pk = panel + k * panel_stride;
              if (b == 0 && !start_term) {
                shared[tile] ? micro_tile<true, true>(entries, slots, pk, out)
                             : micro_tile<true, false>(entries, slots, pk, out);
              } else {
                shared[tile] ? micro_tile<false, true>(entries, slots, pk, out)
                             : micro_tile<false, false>(entries, slots, pk, out);
              }
            }
            continue;
          }
          const int64_t s0 = h == 0 ? 0 : split;
          const int64_t s1 = h == 0 ? split : slots;
          float* ya = yq + row_at;
          float* yb = yq + yb_floats + row_at;
          const float* pb = panel + panel_stride;
          for (int row0 = 0; row0 < kNmGemmTileRows; row0 += 3) {
            if (b == 0 && h == 0 && !start_term) {
              micro_tile_wide<true>(entries, s0, s1, row0, panel, pb, ya, yb);
            } else {
              micro_tile_wide<false>(entries, s0, s1, row0, panel, pb, ya, yb);
            }
          }
        }
      }
      q += step;
    }
  }
  const int64_t r_begin = tile0 * kNmGemmTileRows;
  const int64_t r_end = tile1 * kNmGemmTileRows < a.rows ? tile1 * kNmGemmTileRows : a.rows;
  for (int64_t q = 0; q < panels; ++q) {
    const int64_t width = tokens - q * kNmGemmPanel;
    store_transposed(a, r_begin, r_end, t0 + q * kNmGemmPanel,
                     width < kNmGemmPanel ? width : kNmGemmPanel, scratch + q * yb_floats);
  }
  _mm_sfence();  // streaming stores ordered before the caller's synchronisation
}

}  // namespace nms::detail
