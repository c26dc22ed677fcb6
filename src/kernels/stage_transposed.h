// PRIVATE header: the staging step of the transposed packers (nm_gemm_pack_masked_transposed_into,
// nm_gemm_bf16_pack_masked_transposed_into): a block of rows of W, in a row order, transposed into
// a small buffer the packer then reads row by row.
#pragma once

#include <cstdint>
#include <span>

#include "nmsparse/core/isa.h"
#include "nmsparse/core/matrix_view.h"

namespace nms::detail {

// stage[(j - j0) · ld + c] = w[order(col0 + c)][j] for j in [j0, j1), c in [0, width) (order
// empty: the identity): 16 x 16 blocks through registers at AVX2 and above (`isa`), the edges
// element by element. Rows of W are read side by side, j1 - j0 floats each.
void stage_transposed(ConstMatrixViewF w, std::span<const int64_t> order, int64_t j0, int64_t j1,
                      int64_t col0, int64_t width, int64_t ld, Isa isa, float* stage);

}  // namespace nms::detail
