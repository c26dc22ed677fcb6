// PRIVATE header: nm_wgrad's permute route (NmWgradKernel::kPermute, nm_wgrad.h): dWᵀ = Xᵀ · (dYᵀ)ᵀ
// on nm_gemm's permute kernel (src/kernels/nm_gemm_lanes_layout.h), with dYᵀ [out, T] in its
// lane form and dW written through the kernel's Yᵀ form.
#pragma once

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms::detail {

// The lane form of dYᵀ (rows = dy.cols, depth = dy.rows) straight from dy's kCols compression:
// per block of 32 rows, 4 chunks (up to 64 slots) of every row are decoded into a 16 KiB scratch
// tile (each row's input two pieces ahead prefetched) and written out slot by slot, 32 rows side
// by side (wgrad_lane_piece_*: 16 x 16 transposes at AVX-512). Slots of a partial last chunk past
// the row's slots are zeroed. O(out · T · n/m). Throws nms::Error naming the column of dY with an
// index >= m. Needs m to divide 16 (the kernel's chunk) and the AVX-512 level.
void wgrad_lanes_from_compressed(const CompressedNm& dy, AlignedBuffer<float>& values,
                                 AlignedBuffer<int32_t>& lanes);

}  // namespace nms::detail
