// PRIVATE header: the AVX2 2:4 packer of nm_gemm_pack_masked_into (nm_gemm_pack24_avx2.cpp, the
// only unit built with its flags; called after the isa_active() check). Plain types only.
#pragma once

#include <cstdint>

#include "kernels/nm_gemm_layout.h"

namespace nms::detail {

// nm_gemm_pack_run24_avx512's contract at the AVX2 level (nm_gemm_pack24_avx512.h): the entries
// of one (depth block, tile) run of a 2:4 operand or of its part from column col_base, mask column
// col0 a multiple of 16 (8 suffices here), width a multiple of 4; false, `run` partly written,
// when a group keeps more than 2.
bool nm_gemm_pack_run24_avx2(const float* const rows[kNmGemmTileRows],
                             const uint64_t* const mask_rows[kNmGemmTileRows], int64_t col0,
                             int64_t col_base, int64_t width, float* run);

}  // namespace nms::detail
