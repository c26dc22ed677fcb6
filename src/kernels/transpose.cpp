// transpose_into, transpose_mask and gather_columns_into (nmsparse/kernels/transpose.h).
#include "nmsparse/kernels/transpose.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/views_overlap.h"
#include "kernels/row_order.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#ifdef NMS_HAVE_AVX512_KERNELS
#include "kernels/transpose_avx2.h"
#include "kernels/transpose_avx512.h"
#endif

namespace nms {

void detail::check_row_order(std::span<const int64_t> order, int64_t rows, const char* what) {
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] < 0 || order[k] >= rows) {
      throw_error(what, concat("order[", k, "] = ", order[k], " is outside [0, ", rows, ")"));
    }
  }
}

namespace {

constexpr int64_t kBlock = 16;
constexpr int64_t kColumnsPerItem = 256;  // dst rows per work item: 256 x K floats written
// Destinations at least this large are written with non-temporal stores (AVX2 / AVX-512, aligned
// rows): they do not fit the caches anyway, and each dst line is written whole by one block, so
// the stores skip reading every line for ownership first. 4096 x 4096, one thread, Xeon: 21-38 ms
// with plain stores, 8.8 ms streaming (memcpy of the matrix: 5.8 ms); at 1024 x 1024 the two are
// alike.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// The rows `order` names (0 .. rows - 1 when empty), checked.
std::vector<int64_t> checked_order(std::span<const int64_t> order, int64_t rows, const char* what) {
  detail::check_row_order(order, rows, what);
  if (order.empty()) {
    std::vector<int64_t> out(static_cast<size_t>(rows));
    for (int64_t k = 0; k < rows; ++k) out[static_cast<size_t>(k)] = k;
    return out;
  }
  return {order.begin(), order.end()};
}

}  // namespace

void transpose_into(ConstMatrixViewF src, MatrixViewF dst, std::span<const int64_t> order) {
  const std::vector<int64_t> rows = checked_order(order, src.rows(), "transpose_into");
  const auto k_len = static_cast<int64_t>(rows.size());
  NMS_CHECK(dst.rows() == src.cols() && dst.cols() == k_len, "dst is ", dst.rows(), " x ",
            dst.cols(), ", expected ", src.cols(), " x ", k_len);
  const int64_t c_len = src.cols();
#ifdef NMS_HAVE_AVX512_KERNELS
  const Isa isa = isa_active();
  const bool simd = isa >= Isa::kAvx2;
#else
  const bool simd = false;
#endif
  const bool stream = simd && c_len * k_len * int64_t{4} >= kStreamBytes &&
                      reinterpret_cast<uintptr_t>(dst.row(0)) % 64 == 0 && dst.ld() % 16 == 0;
  const int64_t items = (c_len + kColumnsPerItem - 1) / kColumnsPerItem;
  detail::parallel_for(items, [&](int64_t item) {
    const int64_t j_begin = item * kColumnsPerItem;
    const int64_t j_end = std::min(c_len, j_begin + kColumnsPerItem);
    int64_t k0 = 0;
    if (simd) {
#ifdef NMS_HAVE_AVX512_KERNELS
      for (; k0 + kBlock <= k_len; k0 += kBlock) {
        int64_t j0 = j_begin;
        for (; j0 + kBlock <= j_end; j0 += kBlock) {
          const float* block_rows[kBlock];
          for (int64_t i = 0; i < kBlock; ++i) block_rows[i] = src.row(rows[k0 + i]) + j0;
          if (isa == Isa::kAvx512) {
            detail::transpose16_avx512(block_rows, dst.row(j0) + k0, dst.ld(), stream);
          } else {
            detail::transpose16_avx2(block_rows, dst.row(j0) + k0, dst.ld(), stream);
          }
        }
        for (; j0 < j_end; ++j0) {
          for (int64_t i = 0; i < kBlock; ++i) dst(j0, k0 + i) = src(rows[k0 + i], j0);
        }
      }
      if (stream) isa == Isa::kAvx512 ? detail::stream_fence_avx512() : detail::stream_fence_avx2();
#endif
    }
    for (; k0 < k_len; k0 += kBlock) {  // scalar: whole matrix, or the last k_len % 16 rows
      const int64_t k1 = std::min(k_len, k0 + kBlock);
      for (int64_t j = j_begin; j < j_end; ++j) {
        for (int64_t k = k0; k < k1; ++k) dst(j, k) = src(rows[k], j);
      }
    }
  });
}

namespace {

// Transposes a 64 x 64 bit matrix in place: bit c of a[r] <-> bit r of a[c]. Six stages; the
// stage of width j swaps, in every 2j x 2j block, the j x j block above the diagonal (rows k with
// bit j clear, their upper j columns) with the one below it (rows k + j, their lower j columns).
void transpose_bits64(uint64_t (&a)[64]) {
  uint64_t low = 0x00000000FFFFFFFFull;  // the lower j columns of every 2j-column block
  for (int j = 32; j != 0; j >>= 1, low ^= low << j) {
    for (int base = 0; base < 64; base += 2 * j) {
      for (int k = base; k < base + j; ++k) {
        const uint64_t t = ((a[k] >> j) ^ a[k + j]) & low;
        a[k + j] ^= t;
        a[k] ^= t << j;
      }
    }
  }
}

}  // namespace

BitMask transpose_mask(const BitMask& mask, std::span<const int64_t> order) {
  const std::vector<int64_t> rows = checked_order(order, mask.rows(), "transpose_mask");
  const auto k_len = static_cast<int64_t>(rows.size());
  const int64_t c_len = mask.cols();
  BitMask out(c_len, k_len);
  // 64 x 64 bit blocks: word i = bits j0 .. j0 + 63 of source row k0 + i (0 past the end, so the
  // destination's padding stays 0); transposed, word b is bits k0 .. k0 + 63 of destination row
  // j0 + b. 4096 x 4096, one thread, Zen 4: 5.0 ms with 8 x 8 blocks (each source word loaded and
  // each destination word read and written 8 times), 1.45 ms with these.
  const int64_t items = (c_len + 63) / 64;
  detail::parallel_for(items, [&](int64_t item) {
    const int64_t j0 = item * 64;
    const int64_t jn = std::min<int64_t>(64, c_len - j0);
    uint64_t block[64];
    for (int64_t k0 = 0; k0 < k_len; k0 += 64) {
      const int64_t kn = std::min<int64_t>(64, k_len - k0);
      for (int64_t i = 0; i < 64; ++i) {
        block[i] = i < kn ? mask.row_words(rows[static_cast<size_t>(k0 + i)])[item] : 0;
      }
      transpose_bits64(block);
      for (int64_t b = 0; b < jn; ++b) out.row_words(j0 + b)[k0 >> 6] = block[b];
    }
  });
  return out;
}

void gather_columns_into(ConstMatrixViewF src, std::span<const int64_t> order, MatrixViewF dst) {
  detail::check_row_order(order, src.cols(), "gather_columns_into");
  const auto k_len = static_cast<int64_t>(order.size());
  NMS_CHECK(dst.rows() == src.rows() && dst.cols() == k_len, "gather_columns_into: dst is ",
            dst.rows(), " x ", dst.cols(), ", expected ", src.rows(), " x ", k_len);
  NMS_CHECK(!detail::views_overlap(src, dst), "gather_columns_into: dst overlaps src");
  NMS_CHECK(src.cols() <= INT32_MAX, "gather_columns_into: ", src.cols(), " columns");
  // 32-bit column numbers: half the index traffic of the int64 order.
  const std::vector<int32_t> cols(order.begin(), order.end());
  // A row's loads land anywhere in it, in no order the hardware prefetcher follows: the next
  // row's lines are prefetched while this one is gathered, one line per 16 elements.
  // [512, 4096] with a random order, one thread, Zen 4: 1.6 ms, against 5.2-5.4 ms for
  // LibTorch's index_select along dim 1 in the same process; without the prefetch 4.0-4.5 ms
  // (index_select 6.3-7.7 ms in that run).
  const int64_t src_cols = src.cols();
  detail::parallel_for(src.rows(), [&](int64_t t) {
    const float* in = src.row(t);
    const float* next = t + 1 < src.rows() ? src.row(t + 1) : nullptr;
    float* out = dst.row(t);
    for (int64_t k0 = 0; k0 < k_len; k0 += 16) {
      if (next != nullptr && k0 < src_cols) __builtin_prefetch(next + k0, 0, 3);
      const int64_t k1 = std::min(k_len, k0 + 16);
      for (int64_t k = k0; k < k1; ++k) out[k] = in[cols[static_cast<size_t>(k)]];
    }
  });
}

}  // namespace nms
