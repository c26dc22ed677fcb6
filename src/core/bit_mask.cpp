#include "nmsparse/core/bit_mask.h"

#include <algorithm>
#include <bit>

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

}  // namespace nms
