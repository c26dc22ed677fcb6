// PRIVATE header: the packed blocks of nm_wgrad and its micro-kernels (plain types and declarations
// only: nm_wgrad_avx512.cpp, built with AVX-512 flags, includes it).
//
// Per work item, per K-block of k_block tokens (a multiple of m, at most kWgradMaxBlockSlots, so
// groups never straddle blocks and a row has at most that many slots in a block):
//
//   X panels   per kWgradPanel-column panel a contiguous [k_block][kWgradPanel] float array
//              (columns past `in` zero), 64-byte aligned.
//   dYᵀ tiles  per tile of kWgradRowTile rows of dYᵀ, that many rows of kWgradSlotStride floats
//              (the kept values of the block, in slot order) and, in a second buffer at the same
//              positions, rows of int32 byte offsets (token inside the block · kWgradPanelBytes:
//              the slot's row of the X panel). Rows past `out` hold value 0, offset 0. The
//              constant stride lets the micro-kernel address all streams from two base
//              registers; at 320 bytes (5 cache lines) the streams fall into different L1 sets.
#pragma once

#include <cstdint>

#include "kernels/nm_gemm_lanes_layout.h"

namespace nms::detail {

inline constexpr int kWgradRowTile = 3;  // RR: rows of dYᵀ per micro-tile
inline constexpr int kWgradPanel = 128;  // columns of X per panel (zmm vectors of 16)
inline constexpr int kWgradPanelBytes = kWgradPanel * 4;  // bytes of one panel row
inline constexpr int kWgradMaxBlockSlots = 64;            // slots of one row in one K-block
inline constexpr int kWgradSlotStride = 80;               // words between rows of a packed tile
inline constexpr int kWgradTileWords = kWgradRowTile * kWgradSlotStride;
static_assert(kWgradPanel % 16 == 0 && kWgradPanel <= 256);
// dW at least this large (and 64-byte aligned rows) is written in whole lines with streaming
// stores where the route writes each line once in its last pass (nm_wgrad_bf16; nm_wgrad's
// permute route), and so are the permute route's Xᵀ and panels (wgrad_split_x_avx512) when X is:
// no read for ownership of lines the caches could not keep anyway.
inline constexpr int64_t kWgradStreamBytes = int64_t{8} << 20;

// One row of dYᵀ (one column of the kCols-compressed dY) restricted to one K-block.
struct WgradDecodeArgs {
  const float* values;     // the row's compressed values, from slot s0
  const uint8_t* indices;  // the row's index bit string (row_bytes bytes)
  int64_t row_bytes;
  int64_t s0;  // first slot of the block (a multiple of n)
  int slots;   // slots in the block (<= kWgradMaxBlockSlots)
  int bits;    // index bits (0 for m == 1)
  int m;
  const int32_t* group_token;  // [kWgradMaxBlockSlots + 16]: (s / n) · m, s relative to s0
};

// Writes the block's values to vals[0, slots) and offsets ((group_token[s] + index) · 256) to
// offs[0, slots); returns false if an index is >= m (nothing else is checked).
using WgradDecodeFn = bool (*)(const WgradDecodeArgs& a, float* vals, int32_t* offs);
bool wgrad_decode_scalar(const WgradDecodeArgs& a, float* vals, int32_t* offs);
bool wgrad_decode_avx512(const WgradDecodeArgs& a, float* vals, int32_t* offs);

// One piece of the permute route's lane form of dYᵀ (wgrad_lanes.cpp): the decoded values and
// offsets of kLaneRows (32) rows (vals / offs: [kLaneRows][kWgradMaxBlockSlots], row l from
// l · kWgradMaxBlockSlots; only slots [0, slots) are read) written slot-major:
// out_values[s · 32 + l] = vals[l][s], out_lanes[s · 32 + l] = (offs[l][s] / kWgradPanelBytes) %
// kLaneChunk (the slot's token inside its 16-token chunk). 1 <= slots <= kWgradMaxBlockSlots;
// out_values and out_lanes 64-byte aligned (the AVX-512 writer streams whole cache lines).
using WgradLanePieceFn = void (*)(const float* vals, const int32_t* offs, int slots,
                                  float* out_values, int32_t* out_lanes);
void wgrad_lane_piece_scalar(const float* vals, const int32_t* offs, int slots, float* out_values,
                             int32_t* out_lanes);
void wgrad_lane_piece_avx512(const float* vals, const int32_t* offs, int slots, float* out_values,
                             int32_t* out_lanes);

// One micro-tile: C[rows, cols] (row stride ldc floats) = (first ? start : C) + Σ_s vals[r][s] ·
// panel row offs[r][s], s < slots, in slot order, one fused multiply-add per term and element.
// vals / offs: a packed tile (rows kWgradSlotStride apart). 1 <= rows <= kWgradRowTile,
// 1 <= cols <= kWgradPanel. Only
// C[0..rows, 0..cols) is read and written; the panel is read in full rows.
// `next_c` (may be null): the next tile's C (next_rows rows, stride ldc), prefetched meanwhile.
struct WgradTileArgs {
  const float* vals;
  const int32_t* offs;
  int slots;
  const float* panel;
  float* c;
  int64_t ldc;
  int rows, cols;
  bool first;
  const float* next_c;
  int next_rows;
  // With `first`: when decay_w is set, C starts from decay · W (row stride decay_ld_w) where
  // decay_keep (bytes, row stride decay_ld_keep) is 0, and from 0 where it is not, instead of 0.
  const float* decay_w;
  const uint8_t* decay_keep;
  int64_t decay_ld_w;
  int64_t decay_ld_keep;
  float decay;
  // The direct form (wgrad_tile_m4_avx512 only), which replaces vals / offs: row r's values are
  // row_values[r][0 .. slots) (the kCols compression of dY from the block's first slot) and its
  // 2-bit in-group indices are row_indices[r] (slot s at bits 2s, 2s + 1); slot s's token in the
  // block is (s / n) · 4 + index. Rows >= `rows` are not read.
  const float* row_values[kWgradRowTile];
  uint64_t row_indices[kWgradRowTile];
  int n;
};

// The start value of C(r, j) for a first block (the decay term or 0).
inline float wgrad_start(const WgradTileArgs& t, int r, int j) {
  if (t.decay_w == nullptr) return 0.0f;
  return t.decay_keep[r * t.decay_ld_keep + j] == 0 ? t.decay * t.decay_w[r * t.decay_ld_w + j]
                                                    : 0.0f;
}
using WgradTileFn = void (*)(const WgradTileArgs& t);

// The scalar specification (std::fma per term) and the AVX2 and AVX-512 kernels (bitwise the
// same result).
void wgrad_tile_scalar(const WgradTileArgs& t);
void wgrad_tile_avx2(const WgradTileArgs& t);
void wgrad_tile_avx512(const WgradTileArgs& t);

// The same micro-tile in the direct form, for m = 4 and n = 1 or 2 (2-bit indices): no decoded
// tile and no offset loads, each slot's panel row is found from its index bits in registers.
// slots <= 32 (a 64-token K-block). Bitwise the same result as wgrad_tile_scalar on the decoded
// tile.
inline constexpr int kWgradDirectMaxSlots = 32;
void wgrad_tile_m4_avx512(const WgradTileArgs& t);

// The permute route's two copies of X ([tokens, in], row stride ldx) made in one pass over its
// rows (wgrad_permute_from_lanes; the hybrid kernel's tokens are the in features): with S =
// super, the first S - kLanePanel features of each full super-tile and the features after the last
// one transposed into x_t (feature f, token t at x_t[f · ld_t + t]), the last kLanePanel of
// super-tile p copied into its panel (token t, feature (p + 1) · S - kLanePanel + i at
// panels[(p · tokens + t) · kLanePanel + i]). x_t's rows of the panels' features are not written
// (the kernel does not read them), and a partial last block of 16 tokens writes zeros past
// `tokens` (ld_t >= tokens rounded up to 16). x_t and panels 64-byte aligned, ld_t a multiple of
// 16; with `stream` every line is written around the cache.
struct WgradSplitXArgs {
  const float* x;
  int64_t ldx, tokens, in, super;
  float* x_t;
  int64_t ld_t;
  float* panels;
  bool stream;
};
// Tokens [t_begin, t_end), t_begin a multiple of 16.
void wgrad_split_x_avx512(const WgradSplitXArgs& a, int64_t t_begin, int64_t t_end);

}  // namespace nms::detail
