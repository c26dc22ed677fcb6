// mvue_emit_lanes (grad/emit_lanes.h).
#include "grad/emit_lanes.h"

#include <bit>

namespace nms::detail {

void mvue_emit_lanes(const float* lanes, int lane_count, int n, int m, int bits, float* v,
                     int64_t value_ld, uint8_t* idx, int64_t index_ld, int64_t slot0) {
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
    for (int k = 0; k < n; ++k) {
      const int i = std::countr_zero(kept);
      kept &= kept - 1;
      vals[k] = lanes[i * lane_count + l];
      if (bits == 0) continue;                 // m == 1: no index bits
      const int64_t bit = (slot0 + k) * bits;  // <= 6 bits: at most two bytes
      const unsigned shifted = static_cast<unsigned>(i) << (bit & 7);
      row[bit >> 3] = static_cast<uint8_t>(row[bit >> 3] | shifted);
      if ((bit & 7) + bits > 8)
        row[(bit >> 3) + 1] = static_cast<uint8_t>(row[(bit >> 3) + 1] | (shifted >> 8));
    }
  }
}

}  // namespace nms::detail
