// PRIVATE header: the packed layout of NmGemmOperand (nm_gemm.h), shared by the packer, the
// scalar path and the SIMD kernels (plain data and arithmetic only: the AVX units include it).
//
// A [R, K] N:M along K. Rows in tiles of kNmGemmTileRows (6; the last tile padded with zero rows),
// K in depth blocks of kc columns (the largest multiple of m <= the cap the operand was packed
// for: nm_gemm_depth_block; kc is stored in the operand). Every row
// has the same slots_per_row = K / m · n kept slots (slot g: group g / n); depth block b holds
// slots [b · kc / m · n, ...). Entries are stored depth block by depth block, then tile by tile,
// then slot by slot, then row by row: each (block, tile) is one contiguous run the kernel streams,
// and a whole depth block is contiguous across tiles. An entry is {value, offset} (2 floats, the
// offset an int32 in the second): offset = the slot's column relative to its depth block times
// kNmGemmPanel, the float offset of that column's row in a packed [kc][64] panel of Xᵀ. Padding
// rows hold value 0 at offset 0.
#pragma once

#include <cstdint>

namespace nms {

inline constexpr int64_t kNmGemmTileRows = 6;  // rows of A per micro-tile (6 x 4 accumulators)
inline constexpr int64_t kNmGemmPanel = 64;    // tokens per panel: 4 zmm of 16 lanes
// Depth-block caps: 128 columns (a 32 KB panel) for the AVX-512 kernels and the scalar path, 64
// (16 KB) for the AVX2 kernel, whose one-row micro-kernel streams the whole panel per row and
// shares Zen 2's 32 KB L1 with the entries and output rows. On Zen 2, one thread, 2:4, 64 against
// 128: forward 2048^3 156 -> 142-149 ms, 512 x 4096 -> 4096 151-155 -> 143 ms, 8192 x 768 -> 3072
// level (347-352 ms); weight gradient with MVUE 383 -> 360, 160 -> 144, 155 -> 144 ms (same three
// shapes); 32 columns measured between the two.
inline constexpr int64_t kNmGemmMaxDepthBlock = 128;
inline constexpr int64_t kNmGemmDepthBlockAvx2 = 64;
// Cache blocking (nm_gemm.h): panels per work item, rows per row chunk of A (a multiple of 48), and
// the Xᵀ workspace packed at once (floats; at least one group of panels).
inline constexpr int64_t kNmGemmGroupPanels = 8;
inline constexpr int64_t kNmGemmChunkRows = 384;
inline constexpr int64_t kNmGemmSlabFloats = int64_t{1} << 21;  // 8 MB

namespace detail {

// The depth block of an operand packed now (at the active ISA level) for pattern m: the largest
// multiple of m <= the level's cap (m <= 64 <= every cap). Defined in nm_gemm_pack.cpp.
int64_t nm_gemm_depth_block(int m);
// Whether kc is the depth block some level packs for pattern m (an operand's, before use).
inline bool nm_gemm_depth_block_valid(int m, int64_t kc) {
  return m > 0 && (kc == kNmGemmMaxDepthBlock / m * m || kc == kNmGemmDepthBlockAvx2 / m * m);
}

struct NmGemmLayout {
  int64_t rows = 0;
  int64_t depth = 0;
  int n = 0;
  int m = 0;
  int64_t depth_block = 0;   // kc
  int64_t tiles = 0;         // ceil(rows / 6)
  int64_t depth_blocks = 0;  // ceil(depth / kc)
  int64_t slots_per_row = 0;
  int64_t slots_per_block = 0;  // kc / m · n (the last block may hold fewer)

  // kc: the operand's depth block (a multiple of m, at most kNmGemmMaxDepthBlock).
  NmGemmLayout(int64_t r, int64_t k, int nn, int mm, int64_t kc)
      : rows(r),
        depth(k),
        n(nn),
        m(mm),
        depth_block(kc),
        tiles((r + kNmGemmTileRows - 1) / kNmGemmTileRows),
        depth_blocks((k + depth_block - 1) / depth_block),
        slots_per_row(k / mm * nn),
        slots_per_block(depth_block / mm * nn) {}

  // Floats of one packed Xᵀ panel for every depth block: [depth_blocks][kc][64] (the last block's
  // rows past its width unused).
  int64_t panel_floats() const { return depth_blocks * depth_block * kNmGemmPanel; }
  // Floats of the packed operand: 2 per entry.
  int64_t total_floats() const { return tiles * slots_per_row * kNmGemmTileRows * 2; }
  // Float index of entry (tile, slot, row l).
  int64_t entry(int64_t tile, int64_t slot, int64_t l) const {
    const int64_t b = slot / slots_per_block;
    const int64_t in_block = block_last_slot(b) - block_first_slot(b);
    return ((b * slots_per_block * tiles + tile * in_block + slot - b * slots_per_block) *
                kNmGemmTileRows +
            l) *
           2;
  }
  // Slots [first, last) of depth block b.
  int64_t block_first_slot(int64_t b) const { return b * slots_per_block; }
  int64_t block_last_slot(int64_t b) const {
    const int64_t last = (b + 1) * slots_per_block;
    return last < slots_per_row ? last : slots_per_row;
  }
  // Columns of depth block b.
  int64_t block_width(int64_t b) const {
    const int64_t left = depth - b * depth_block;
    return left < depth_block ? left : depth_block;
  }
};

// Cache blocking of one call (nm_gemm.h; the sizes were chosen by measurement, see there). A work
// item is (row chunk of A, group of up to kNmGemmGroupPanels panels): per depth block, per panel of
// the group, per tile of the chunk, so the chunk's slice of A for a depth block is read from
// memory once per group and then from L2. Xᵀ is packed up front, one slab of panels at a time.
struct NmGemmBlocking {
  int64_t tiles = 0;         // tiles of A
  int64_t units = 0;         // ceil(tiles / 8): chunks are made of whole units of 8 tiles
  int64_t chunks = 0;        // row chunks, of nearly equal size (at most one unit apart)
  int64_t group_panels = 0;  // panels per work item (the last group of a slab may hold fewer)
  int64_t slab_panels = 0;   // panels of Xᵀ packed at once: a multiple of group_panels
  bool own_pack = false;     // each item packs its own panels (one row chunk: nothing to share)

  // First tile of chunk c (c <= chunks): a multiple of 8 tiles (48 rows: whole tiles and whole
  // 16-row transposes into Y).
  int64_t chunk_begin(int64_t c) const {
    const int64_t t = c * units / chunks * 8;
    return t < tiles ? t : tiles;
  }
  // Tiles of the largest chunk.
  int64_t max_chunk_tiles() const { return (units + chunks - 1) / chunks * 8; }
};

// Rows of one panel's output block for `tiles` tiles: rounded up to 16 (the transposes into Y
// read whole 16-row blocks).
inline int64_t nm_gemm_out_rows(int64_t tiles) {
  return (tiles * kNmGemmTileRows + 15) / 16 * 16;
}

}  // namespace detail
}  // namespace nms
