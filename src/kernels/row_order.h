// PRIVATE header: the row-order argument of transpose_into, transpose_mask and
// nm_gemm_pack_masked_transposed_into (nmsparse/kernels/transpose.h, nm_gemm.h).
#pragma once

#include <cstdint>
#include <span>

namespace nms::detail {

// Throws nms::Error from `what`, naming the first entry of `order` outside [0, rows).
void check_row_order(std::span<const int64_t> order, int64_t rows, const char* what);

}  // namespace nms::detail
