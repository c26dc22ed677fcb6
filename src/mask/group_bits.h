// PRIVATE header: writing and reading one group's bits in a BitMask row.
#pragma once

#include <cstdint>

namespace nms::detail {

// ORs the low m bits of `bits` into the packed row `words` at bit offset j0. A group may straddle
// two 64-bit words when m does not divide 64 (m = 3, 24, ...).
inline void or_group_bits(uint64_t* words, int64_t j0, int m, uint64_t bits) {
  const int64_t word = j0 >> 6;
  const int shift = static_cast<int>(j0 & 63);
  words[word] |= bits << shift;
  if (shift != 0 && shift + m > 64) words[word + 1] |= bits >> (64 - shift);
}

// The m bits of the group starting at bit j0 of a packed row.
inline uint64_t read_group_bits(const uint64_t* words, int64_t j0, int m) {
  const int64_t word = j0 >> 6;
  const int shift = static_cast<int>(j0 & 63);
  uint64_t bits = words[word] >> shift;
  if (shift != 0 && shift + m > 64) bits |= words[word + 1] << (64 - shift);
  return m == 64 ? bits : bits & ((uint64_t{1} << m) - 1);
}

}  // namespace nms::detail
