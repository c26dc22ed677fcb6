// PRIVATE header: the packed sparse operand of nm_wgrad and its micro-kernels (plain types and
// declarations only: nm_wgrad_avx512.cpp, built with AVX-512 flags, includes it).
//
// Packed dYᵀ (NmWgradOperand::slots): rows of dYᵀ (output features) in tiles of kWgradRowTile = 6
// (the last tile padded with {0, 0} rows); per tile, for every slot s of the row's compressed
// token sequence (s = group · n + j, all groups of the whole token range in order), 6 consecutive
// WgradSlot entries, one per row of the tile. Entry (tile b, slot s, row r) is at
// (b · slots_per_row + s) · 6 + r. `offset` is the byte offset of the slot's token inside its
// K-block panel: (token mod k_block) · kWgradPanel · sizeof(float).
//
// X panels: per K-block of k_block tokens (a multiple of m, so groups never straddle blocks) and
// per 64-column panel, a contiguous [k_block][64] float array (columns past `in` are zero).
#pragma once

#include <cstdint>

namespace nms::detail {

inline constexpr int kWgradRowTile = 6;  // RR: rows of dYᵀ per micro-tile
inline constexpr int kWgradPanel = 64;   // columns of X per panel (4 zmm)

struct WgradSlot {
  float value;
  int32_t offset;  // bytes into the K-block panel
};
static_assert(sizeof(WgradSlot) == 8, "WgradSlot is two 32-bit words");

// One micro-tile: C[rows, cols] (row stride ldc floats) = (first ? 0 : C) + Σ_s value · panel row,
// over `slots` entries of `a` (6 per slot, tile-interleaved as above), in slot order, one fused
// multiply-add per term and element. 1 <= rows <= 6, 1 <= cols <= 64. Only C[0..rows, 0..cols) is
// read and written; the panel is read in full rows of 64 floats.
using WgradTileFn = void (*)(const WgradSlot* a, int64_t slots, const float* panel, float* c,
                             int64_t ldc, int rows, int cols, bool first);

// The scalar specification (std::fma per term) and the AVX-512 kernel (bitwise the same result).
void wgrad_tile_scalar(const WgradSlot* a, int64_t slots, const float* panel, float* c, int64_t ldc,
                       int rows, int cols, bool first);
void wgrad_tile_avx512(const WgradSlot* a, int64_t slots, const float* panel, float* c, int64_t ldc,
                       int rows, int cols, bool first);

}  // namespace nms::detail
