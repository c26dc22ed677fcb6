// Packed 2-D bit mask: one bit per element of a rows x cols matrix, row-major, each row padded to
// whole 64-bit words (bit j of row i is bit (j % 64) of word i * words_per_row + j / 64). Padding
// bits are always zero, so popcounts over whole words are exact.
//
// Memory: rows * ceil(cols / 64) * 8 bytes (a 4096 x 4096 mask is 2 MiB).
#pragma once

#include <cstdint>
#include <vector>

#include "nmsparse/core/error.h"

namespace nms {

class BitMask {
 public:
  BitMask() = default;
  BitMask(int64_t rows, int64_t cols);  // all zero

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t words_per_row() const { return words_per_row_; }

  bool get(int64_t i, int64_t j) const {
    NMS_DCHECK(i >= 0 && i < rows_ && j >= 0 && j < cols_);
    return (words_[i * words_per_row_ + (j >> 6)] >> (j & 63)) & 1U;
  }
  void set(int64_t i, int64_t j, bool value = true) {
    NMS_DCHECK(i >= 0 && i < rows_ && j >= 0 && j < cols_);
    uint64_t& w = words_[i * words_per_row_ + (j >> 6)];
    const uint64_t bit = uint64_t{1} << (j & 63);
    w = value ? (w | bit) : (w & ~bit);
  }
  void fill(bool value);

  const uint64_t* row_words(int64_t i) const { return words_.data() + i * words_per_row_; }
  uint64_t* row_words(int64_t i) { return words_.data() + i * words_per_row_; }

  int64_t count() const;               // all set bits
  int64_t count_row(int64_t i) const;  // set bits in row i
  int64_t count_col(int64_t j) const;  // set bits in column j
  // Set bits in row i, columns [j0, j0 + len). Requires the range inside the row.
  int64_t count_row_range(int64_t i, int64_t j0, int64_t len) const;
  // Set bits in column j, rows [i0, i0 + len).
  int64_t count_col_range(int64_t j, int64_t i0, int64_t len) const;
  // Set bits in the tile rows [i0, i0 + h) x columns [j0, j0 + w).
  int64_t count_tile(int64_t i0, int64_t j0, int64_t h, int64_t w) const;

  friend bool operator==(const BitMask&, const BitMask&) = default;

 private:
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t words_per_row_ = 0;
  std::vector<uint64_t> words_;
};

// Rows [row_begin, row_end) of `mask` as bytes: row i's cols() bytes at out + (i - row_begin) · ld,
// 1 where the bit is set and 0 where not (a uint8 mask tensor's layout). 64 bytes per mask word at
// the AVX-512 level (a masked vmovdqu8), 8 per 64-bit multiply below it: a 4096 x 4096 mask in
// 0.37 against 2.2 ms either way (best of 7 in a loop, one thread, Zen 4). Callers split rows
// across threads; no checks beyond debug asserts (ld >= cols).
void bit_mask_rows_to_bytes(const BitMask& mask, int64_t row_begin, int64_t row_end, uint8_t* out,
                            int64_t ld);
// The inverse, overwriting rows [row_begin, row_end) of `mask` (their padding bits zero): bit j of
// row i is set iff in[(i - row_begin) · ld + j] != 0.
void bit_mask_rows_from_bytes(const uint8_t* in, int64_t ld, int64_t row_begin, int64_t row_end,
                              BitMask& mask);

}  // namespace nms
