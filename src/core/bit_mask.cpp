#include "nmsparse/core/bit_mask.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "nmsparse/core/isa.h"
#if defined(NMS_HAVE_AVX512_KERNELS)
#include "core/bit_mask_bytes_avx512.h"
#endif

namespace nms {

BitMask::BitMask(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {
  NMS_CHECK(rows >= 0 && cols >= 0, "negative mask shape (", rows, " x ", cols, ")");
  words_per_row_ = (cols + 63) / 64;
  words_.assign(static_cast<size_t>(detail::mul_checked(rows, words_per_row_, "mask words")), 0);
}

void BitMask::fill(bool value) {
  for (int64_t i = 0; i < rows_; ++i) {
    uint64_t* w = row_words(i);
    for (int64_t k = 0; k < words_per_row_; ++k) w[k] = value ? ~uint64_t{0} : 0;
    if (value && (cols_ & 63) != 0) w[words_per_row_ - 1] = (uint64_t{1} << (cols_ & 63)) - 1;
  }
}

int64_t BitMask::count() const {
  int64_t c = 0;
  for (uint64_t w : words_) c += std::popcount(w);
  return c;
}

int64_t BitMask::count_row(int64_t i) const {
  return count_row_range(i, 0, cols_);
}

int64_t BitMask::count_col(int64_t j) const {
  return count_col_range(j, 0, rows_);
}

int64_t BitMask::count_row_range(int64_t i, int64_t j0, int64_t len) const {
  NMS_DCHECK(i >= 0 && i < rows_ && j0 >= 0 && len >= 0 && j0 + len <= cols_);
  const uint64_t* w = row_words(i);
  int64_t c = 0;
  int64_t j = j0;
  const int64_t end = j0 + len;
  while (j < end) {
    const int64_t word = j >> 6;
    const int64_t lo = j & 63;
    const int64_t hi = std::min<int64_t>(64, lo + (end - j));  // exclusive bit bound in this word
    uint64_t bits = w[word] >> lo;
    if (hi - lo < 64) bits &= (uint64_t{1} << (hi - lo)) - 1;
    c += std::popcount(bits);
    j += hi - lo;
  }
  return c;
}

int64_t BitMask::count_col_range(int64_t j, int64_t i0, int64_t len) const {
  NMS_DCHECK(j >= 0 && j < cols_ && i0 >= 0 && len >= 0 && i0 + len <= rows_);
  int64_t c = 0;
  for (int64_t i = i0; i < i0 + len; ++i) c += get(i, j) ? 1 : 0;
  return c;
}

int64_t BitMask::count_tile(int64_t i0, int64_t j0, int64_t h, int64_t w) const {
  int64_t c = 0;
  for (int64_t i = i0; i < i0 + h; ++i) c += count_row_range(i, j0, w);
  return c;
}

void bit_mask_rows_to_bytes(const BitMask& mask, int64_t row_begin, int64_t row_end, uint8_t* out,
                            int64_t ld) {
  NMS_DCHECK(row_begin >= 0 && row_begin <= row_end && row_end <= mask.rows() && ld >= mask.cols());
  const int64_t cols = mask.cols();
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() == Isa::kAvx512) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      detail::mask_row_to_bytes_avx512(mask.row_words(i), cols, out + (i - row_begin) * ld);
    }
    return;
  }
#endif
  for (int64_t i = row_begin; i < row_end; ++i) {
    uint8_t* row = out + (i - row_begin) * ld;
    const uint64_t* words = mask.row_words(i);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const uint64_t byte = (words[j >> 6] >> (j & 63)) & 0xFF;
      // Spread the byte to all 8 bytes, keep bit i in byte i, then make each byte 0 or 1.
      const uint64_t v = (byte * 0x0101010101010101ull) & 0x8040201008040201ull;
      const uint64_t x = ((v + 0x7F7F7F7F7F7F7F7Full) & 0x8080808080808080ull) >> 7;
      std::memcpy(row + j, &x, 8);
    }
    for (; j < cols; ++j) row[j] = mask.get(i, j) ? 1 : 0;
  }
}

void bit_mask_rows_from_bytes(const uint8_t* in, int64_t ld, int64_t row_begin, int64_t row_end,
                              BitMask& mask) {
  NMS_DCHECK(row_begin >= 0 && row_begin <= row_end && row_end <= mask.rows() && ld >= mask.cols());
  const int64_t cols = mask.cols();
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() == Isa::kAvx512) {
    for (int64_t i = row_begin; i < row_end; ++i) {
      detail::mask_row_from_bytes_avx512(in + (i - row_begin) * ld, cols, mask.row_words(i));
    }
    return;
  }
#endif
  for (int64_t i = row_begin; i < row_end; ++i) {
    const uint8_t* row = in + (i - row_begin) * ld;
    uint64_t* words = mask.row_words(i);
    std::fill_n(words, mask.words_per_row(), uint64_t{0});
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      uint64_t x;
      std::memcpy(&x, row + j, 8);
      // Any nonzero byte counts as set: its high bit after adding 0x7F, then moved to bit 0; the
      // multiply gathers the 8 bits into the top byte (byte i -> bit 56 + i).
      x = (((x & 0x7F7F7F7F7F7F7F7Full) + 0x7F7F7F7F7F7F7F7Full) | x) >> 7 & 0x0101010101010101ull;
      words[j >> 6] |= ((x * 0x0102040810204080ull) >> 56) << (j & 63);
    }
    for (; j < cols; ++j) {
      if (row[j] != 0) words[j >> 6] |= uint64_t{1} << (j & 63);
    }
  }
}

}  // namespace nms
