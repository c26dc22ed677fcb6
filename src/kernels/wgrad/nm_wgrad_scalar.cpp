// The scalar decoder and micro-kernel of nm_wgrad: the specification the AVX-512 versions
// reproduce bit for bit (one std::fma per term, slots in order, rows and columns independent).
#include <cmath>

#include "kernels/wgrad/wgrad_kernels.h"

namespace nms::detail {

bool wgrad_decode_scalar(const WgradDecodeArgs& a, float* vals, int32_t* offs) {
  const unsigned mask = (1u << a.bits) - 1u;
  int64_t bit = a.s0 * a.bits;
  unsigned bad = 0;
  for (int s = 0; s < a.slots; ++s) {
    unsigned idx = 0;
    if (a.bits > 0) {
      const int64_t byte = bit >> 3;
      unsigned word = a.indices[byte];
      if (byte + 1 < a.row_bytes) word |= static_cast<unsigned>(a.indices[byte + 1]) << 8;
      idx = (word >> (bit & 7)) & mask;
      bit += a.bits;
    }
    bad |= static_cast<unsigned>(idx >= static_cast<unsigned>(a.m));
    vals[s] = a.values[s];
    offs[s] = (a.group_token[s] + static_cast<int32_t>(idx)) * kWgradPanel *
              static_cast<int32_t>(sizeof(float));
  }
  return bad == 0;
}

void wgrad_lane_piece_scalar(const float* vals, const int32_t* offs, int slots, float* out_values,
                             int32_t* out_lanes) {
  for (int s = 0; s < slots; ++s) {
    for (int l = 0; l < kLaneRows; ++l) {
      out_values[s * kLaneRows + l] = vals[l * kWgradMaxBlockSlots + s];
      out_lanes[s * kLaneRows + l] =
          static_cast<int32_t>(offs[l * kWgradMaxBlockSlots + s] / kWgradPanelBytes % kLaneChunk);
    }
  }
}

void wgrad_tile_scalar(const WgradTileArgs& t) {
  float acc[kWgradRowTile][kWgradPanel];
  for (int r = 0; r < t.rows; ++r) {
    for (int j = 0; j < t.cols; ++j)
      acc[r][j] = t.first ? wgrad_start(t, r, j) : t.c[r * t.ldc + j];
  }
  const auto* base = reinterpret_cast<const unsigned char*>(t.panel);
  for (int s = 0; s < t.slots; ++s) {
    for (int r = 0; r < t.rows; ++r) {
      const float v = t.vals[r * kWgradSlotStride + s];
      const auto* xr = reinterpret_cast<const float*>(base + t.offs[r * kWgradSlotStride + s]);
      for (int j = 0; j < t.cols; ++j) acc[r][j] = std::fma(v, xr[j], acc[r][j]);
    }
  }
  for (int r = 0; r < t.rows; ++r) {
    for (int j = 0; j < t.cols; ++j) t.c[r * t.ldc + j] = acc[r][j];
  }
}

}  // namespace nms::detail
