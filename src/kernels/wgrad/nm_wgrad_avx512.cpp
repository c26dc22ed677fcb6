// The AVX-512 micro-kernel of nm_wgrad (see wgrad_kernels.h): 6 rows x NV zmm columns of
// accumulators; per slot and row one broadcast of the value and NV fused multiply-adds with the
// panel row at the slot's offset. Same arithmetic as wgrad_tile_scalar, element by element.
#include <immintrin.h>

#include <cstdint>

#include "kernels/wgrad/wgrad_kernels.h"

namespace nms::detail {
namespace {

template <int NV>
void tile(const WgradSlot* a, int64_t slots, const float* panel, float* c, int64_t ldc, int rows,
          int cols, bool first) {
  const int last = cols - 16 * (NV - 1);  // 1..16 columns in the last vector
  const auto last_mask = static_cast<__mmask16>(last >= 16 ? 0xFFFFu : (1u << last) - 1u);
  __m512 acc[kWgradRowTile][NV];
#pragma GCC unroll 6
  for (int r = 0; r < kWgradRowTile; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 k = v == NV - 1 ? last_mask : static_cast<__mmask16>(0xFFFFu);
      acc[r][v] =
          first || r >= rows ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k, c + r * ldc + 16 * v);
    }
  }
  const auto* base = reinterpret_cast<const char*>(panel);
  for (int64_t s = 0; s < slots; ++s) {
    const WgradSlot* e = a + s * kWgradRowTile;
#pragma GCC unroll 6
    for (int r = 0; r < kWgradRowTile; ++r) {
      const __m512 w = _mm512_set1_ps(e[r].value);
      const auto* xr = reinterpret_cast<const float*>(base + e[r].offset);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_fmadd_ps(w, _mm512_load_ps(xr + 16 * v), acc[r][v]);
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kWgradRowTile; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 k = v == NV - 1 ? last_mask : static_cast<__mmask16>(0xFFFFu);
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, k, acc[r][v]);
    }
  }
}

}  // namespace

void wgrad_tile_avx512(const WgradSlot* a, int64_t slots, const float* panel, float* c, int64_t ldc,
                       int rows, int cols, bool first) {
  switch ((cols + 15) / 16) {
    case 1:
      tile<1>(a, slots, panel, c, ldc, rows, cols, first);
      break;
    case 2:
      tile<2>(a, slots, panel, c, ldc, rows, cols, first);
      break;
    case 3:
      tile<3>(a, slots, panel, c, ldc, rows, cols, first);
      break;
    default:
      tile<4>(a, slots, panel, c, ldc, rows, cols, first);
      break;
  }
}

}  // namespace nms::detail
