// transpose_into and transpose_mask (nmsparse/kernels/transpose.h).
#include "nmsparse/kernels/transpose.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
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

BitMask transpose_mask(const BitMask& mask, std::span<const int64_t> order) {
  const std::vector<int64_t> rows = checked_order(order, mask.rows(), "transpose_mask");
  const auto k_len = static_cast<int64_t>(rows.size());
  const int64_t c_len = mask.cols();
  BitMask out(c_len, k_len);
  // 8 x 8 bit blocks: byte i of x = bits j0 .. j0+7 of source row k0 + i; after the transpose
  // byte i holds bit i... of each byte, i.e. bits k0 .. k0+7 of destination row j0 + i.
  const int64_t items = (c_len + 63) / 64;
  detail::parallel_for(items, [&](int64_t item) {
    const int64_t j_begin = item * 64;
    const int64_t j_end = std::min(c_len, j_begin + 64);
    for (int64_t k0 = 0; k0 < k_len; k0 += 8) {
      const int64_t kn = std::min<int64_t>(8, k_len - k0);
      for (int64_t j0 = j_begin; j0 < j_end; j0 += 8) {
        uint64_t x = 0;
        for (int64_t i = 0; i < kn; ++i) {
          const uint64_t word = mask.row_words(rows[k0 + i])[j0 >> 6];
          x |= ((word >> (j0 & 63)) & 0xFF) << (8 * i);
        }
        // Transpose the 8 x 8 bit matrix (row i = byte i, column b = bit b) in three swaps.
        uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
        x ^= t ^ (t << 7);
        t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
        x ^= t ^ (t << 14);
        t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
        x ^= t ^ (t << 28);
        const int64_t jn = std::min<int64_t>(8, j_end - j0);
        for (int64_t b = 0; b < jn; ++b) {
          const uint64_t bits = (x >> (8 * b)) & 0xFF;
          out.row_words(j0 + b)[k0 >> 6] |= bits << (k0 & 63);
        }
      }
    }
  });
  return out;
}

}  // namespace nms
