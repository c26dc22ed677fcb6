// mvue_emit_lanes (grad/emit_lanes.h).
#include "grad/emit_lanes.h"

#include <bit>

namespace nms::detail {

void mvue_emit_lanes(const float* lanes, int lane_count, int n, int m, int bits, float* v,
                     int64_t value_ld, uint8_t* idx, int64_t index_ld, int64_t slot0) {
  // Where a group's index fields fit 128 bits with the row's bit offset (n · bits <= 120) they are
  // gathered in one word and OR-ed into the row byte by byte once: OR-ing each field as it was
  // found chained every read-modify-write on the previous one's store (MVUE 16:32 of dY 8192 x
  // 3072 along tokens, compressed, AVX-512, one thread: 148 -> 108 ms, 58 ms with dense output).
  const bool one_word = bits > 0 && n * bits <= kIndexWordBits;
  const int64_t bit0 = slot0 * bits;
  for (int l = 0; l < lane_count; ++l) {
    uint64_t kept = 0;
    int count = 0;
    for (int i = 0; i < m; ++i) {
      const uint64_t k = lanes[i * lane_count + l] != 0.0f;
      kept |= k << i;
      count += static_cast<int>(k);
    }
    for (int c = count; c < n; ++c) kept |= ~kept & (kept + 1);  // lowest free positions
    float* vals = v + l * value_ld + slot0;
    uint8_t* row = idx + l * index_ld;
    IndexWord word = 0;
    for (int k = 0; k < n; ++k) {
      const int i = std::countr_zero(kept);
      kept &= kept - 1;
      vals[k] = lanes[i * lane_count + l];
      if (one_word) {
        word |= static_cast<IndexWord>(i) << (k * bits);
        continue;
      }
      if (bits == 0) continue;                 // m == 1: no index bits
      const int64_t bit = (slot0 + k) * bits;  // <= 6 bits: at most two bytes
      const unsigned shifted = static_cast<unsigned>(i) << (bit & 7);
      row[bit >> 3] = static_cast<uint8_t>(row[bit >> 3] | shifted);
      if ((bit & 7) + bits > 8)
        row[(bit >> 3) + 1] = static_cast<uint8_t>(row[(bit >> 3) + 1] | (shifted >> 8));
    }
    if (!one_word) continue;
    const int shift = static_cast<int>(bit0 & 7);
    word <<= shift;
    uint8_t* at = row + (bit0 >> 3);
    for (int b = 0; b < (shift + n * bits + 7) / 8; ++b) {
      at[b] = static_cast<uint8_t>(at[b] | static_cast<uint8_t>(word >> (8 * b)));
    }
  }
}

}  // namespace nms::detail
