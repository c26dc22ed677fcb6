// PRIVATE header: the AVX-512 2:4 packers of nm_gemm_pack_masked_into
// (nm_gemm_pack24_avx512.cpp, the only unit built with its flags; called after the isa_active()
// check). Plain types only.
#pragma once

#include <cstdint>

#include "kernels/nm_gemm_layout.h"

namespace nms::detail {

// Writes the entries of one (depth block, tile) run of a 2:4 operand to `run` (the layout's
// entry(tile, first slot of the block, 0) onwards), or of the part of it for the block's columns
// [col_base, col_base + width): rows[l] points at the part's first column of row l of the tile
// (nullptr for a padding row; a row of a transposed stage in
// nm_gemm_pack_masked_transposed_into), mask_rows[l] at its mask words, mask columns
// [col0, col0 + width) the part (col0 a multiple of 16, width a multiple of 4); offsets count from
// the block's first column. Returns false, with `run` partly written, when some group of the run
// keeps more than 2: the caller then packs the run with the scalar code.
bool nm_gemm_pack_run24_avx512(const float* const rows[kNmGemmTileRows],
                               const uint64_t* const mask_rows[kNmGemmTileRows], int64_t col0,
                               int64_t col_base, int64_t width, float* run);

// Rows l0 .. l0 + 7 of a block of the lane form (nm_gemm_lanes_layout.h; l0 a multiple of 8),
// chunks [c_begin, c_end) of a 2:4 operand of `depth` columns, into the stage (32-byte aligned):
// slot s of chunk c, row l at stage[((c - c_begin) · 8 + s) · 32 + l] (values and lanes). rows[k]
// points at column `origin` of row l0 + k of A (its columns from origin on, up to c_end · 16, are
// read) and mask_rows[k] at the row's mask words (absolute columns); a null row is a padding row
// (values 0, lanes 0). Per chunk the eight rows' compressed slots are transposed in registers (8 x
// 8, values and lanes), so each slot is one 32-byte store; two 8-element scatters per row and chunk
// took 20.9 ms at 4096 x 4096 (entries form: 12.6 ms). stage_lanes null: the values only (a
// repack from the mask the operand's lanes came from). Returns false, the stage partly written,
// when a group keeps more than 2.
bool nm_gemm_pack_lanes24x8_avx512(const float* const rows[8], const uint64_t* const mask_rows[8],
                                   int64_t c_begin, int64_t c_end, int64_t depth, int64_t origin,
                                   int64_t l0, float* stage_values, int32_t* stage_lanes);

}  // namespace nms::detail
