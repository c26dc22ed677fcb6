// Transposes with an optional row order, for building the backward-data operand of a training
// layer from W every step: (P W)ᵀ and its mask, packed along rows (nm_gemm_pack_masked_into), is
// the operand nm_gemm needs for dX = dY W, and working along rows is ~5x faster than compressing
// W along columns (a 4096 x 4096 fp32 W: transpose ~8 ms + compress rows ~15 ms, against ~70 ms
// for the column compressor on one thread).
//
//   transpose_into(src [R, C], dst [C, K], order):  dst[j][k] = src[order[k]][j]
//   transpose_mask(mask [R, C], order) -> [C, K]:   result[j][k] = mask[order[k]][j]
// with K = R and order[k] = k when `order` is empty; otherwise K = order.size() and every entry
// must be in [0, R) (checked). O(R · C); the fp32 transpose moves 16 x 16 blocks through registers
// (AVX-512) or 8 x 8 (AVX2), the mask 8 x 8 bit blocks in one 64-bit word. Parallel over column
// blocks of src (disjoint rows of dst): identical results for any thread count.
#pragma once

#include <cstdint>
#include <span>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"

namespace nms {

void transpose_into(ConstMatrixViewF src, MatrixViewF dst, std::span<const int64_t> order = {});
BitMask transpose_mask(const BitMask& mask, std::span<const int64_t> order = {});

// dst(t, k) = src(t, order[k]): the columns of src [T, C] in `order` (every entry in [0, C),
// checked; dst [T, order.size()], not overlapping src). dY Pᵀ, the left operand of a Bi-Mask
// layer's backward-data GEMM. Row by row over threads, one indexed load per element, the next
// row prefetched: [512, 4096] with a random order in 1.6 ms, one thread, Zen 4, where LibTorch's
// index_select along dim 1 took 5.2-5.4 ms.
void gather_columns_into(ConstMatrixViewF src, std::span<const int64_t> order, MatrixViewF dst);

}  // namespace nms
