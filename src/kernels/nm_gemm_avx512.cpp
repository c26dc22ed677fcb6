// AVX-512 kernel of nm_gemm (see nm_gemm.h for the scheme, nm_gemm_layout.h for the operand).
#include "kernels/nm_gemm_avx512.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/nm_gemm_layout.h"
#include "kernels/transpose16_avx512.h"

namespace nms::detail {
namespace {

inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
}

// panel[k][t] = x[t0 + t][k0 + k] for k < width_k, t < 64 (zero for t >= width_t).
void pack_panel(const NmGemmArgs& a, int64_t t0, int64_t width_t, int64_t k0, int64_t width_k,
                float* panel) {
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

// yb[r - r_begin][t] -> y[t0 + t][r] for t < width, r in [r_begin, r_end): 16 x 16 blocks
// (r_begin a multiple of 48), written around the cache when a block row is a whole aligned line
// (Y is T x R floats, larger than the caches for training shapes; plain stores read every line
// first: 9 % of the GEMM at T 8192, 768 -> 3072).
void store_transposed(const NmGemmArgs& a, int64_t r_begin, int64_t r_end, int64_t t0,
                      int64_t width, const float* yb) {
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
  const NmGemmLayout lay(a.rows, a.depth, a.n, a.m);
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    pack_panel(a, t0, width, b * lay.depth_block, lay.block_width(b),
               xt + b * lay.depth_block * kNmGemmPanel);
  }
}

void nm_gemm_avx512_block(const NmGemmArgs& a, int64_t tile0, int64_t tile1, int64_t t0,
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
      for (int c = 0; c < 4; ++c) {
        _mm512_store_ps(scratch + q * yb_floats + r * kNmGemmPanel + 16 * c, _mm512_setzero_ps());
      }
    }
  }
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
    for (int64_t q = 0; q < panels; ++q) {
      const float* panel = xt + q * panel_stride + b * block_stride;
      float* yb = scratch + q * yb_floats;
      // The next shared panel (this block's next token panel, else the next block's first) is
      // prefetched into L2 a few lines per tile: the first tiles over it would otherwise wait on
      // memory (+2-5 % at T 8192, 768 -> 3072; within noise at 512, 4096 -> 4096). Panels packed
      // here are in L2 already.
      const bool next_q = q + 1 < panels;
      const char* next = reinterpret_cast<const char*>(next_q ? panel + panel_stride
                                                              : xt + (b + 1) * block_stride);
      const int64_t next_lines = !own && (next_q || b + 1 < lay.depth_blocks)
                                     ? lay.block_width(next_q ? b : b + 1) * 4
                                     : 0;
      const int64_t lines_per_tile = (next_lines + (tile1 - tile0) - 1) / (tile1 - tile0);
      int64_t line = 0;
      for (int64_t tile = tile0; tile < tile1; ++tile) {
        for (int64_t i = 0; i < lines_per_tile && line < next_lines; ++i, ++line) {
          _mm_prefetch(next + line * 64, _MM_HINT_T1);
        }
        const float* entries = block_entries + (tile - tile0) * tile_floats;
        float* out = yb + (tile - tile0) * kNmGemmTileRows * kNmGemmPanel;
        if (b == 0) {
          shared[tile] ? micro_tile<true, true>(entries, slots, panel, out)
                       : micro_tile<true, false>(entries, slots, panel, out);
        } else {
          shared[tile] ? micro_tile<false, true>(entries, slots, panel, out)
                       : micro_tile<false, false>(entries, slots, panel, out);
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
  _mm_sfence();  // streaming stores ordered before the caller's synchronisation
}

}  // namespace nms::detail
