// The scalar micro-kernel of nm_wgrad: the specification the AVX-512 kernel reproduces bit for bit
// (one std::fma per term, slots in order, rows and columns independent).
#include <cmath>

#include "kernels/wgrad/wgrad_kernels.h"

namespace nms::detail {

void wgrad_tile_scalar(const WgradSlot* a, int64_t slots, const float* panel, float* c, int64_t ldc,
                       int rows, int cols, bool first) {
  float acc[kWgradRowTile][kWgradPanel];
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) acc[r][j] = first ? 0.0f : c[r * ldc + j];
  }
  const auto* base = reinterpret_cast<const unsigned char*>(panel);
  for (int64_t s = 0; s < slots; ++s) {
    const WgradSlot* e = a + s * kWgradRowTile;
    for (int r = 0; r < rows; ++r) {
      const float v = e[r].value;
      const auto* xr = reinterpret_cast<const float*>(base + e[r].offset);
      for (int j = 0; j < cols; ++j) acc[r][j] = std::fma(v, xr[j], acc[r][j]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) c[r * ldc + j] = acc[r][j];
  }
}

}  // namespace nms::detail
