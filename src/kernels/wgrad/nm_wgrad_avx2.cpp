// AVX2 + FMA micro-tile of nm_wgrad (see wgrad_kernels.h): the tile's columns in chunks of 32
// (3 rows x 4 ymm = 12 accumulators of the 16 registers), each chunk walking the slots in order,
// so every element gets the same fused multiply-add chain as the scalar specification.
#include <immintrin.h>

#include <cstdint>

#include "kernels/wgrad/wgrad_kernels.h"

namespace nms::detail {
namespace {

constexpr int kChunk = 32;  // columns per pass: 4 vectors of 8

inline __m256i first_lanes8(int count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count < 8 ? count : 8), lane);
}

template <int kRows>
void tile_rows(const WgradTileArgs& t) {
  const auto* base = reinterpret_cast<const unsigned char*>(t.panel);
  for (int j0 = 0; j0 < t.cols; j0 += kChunk) {
    __m256i cm[4];  // columns of this chunk inside the tile
    for (int v = 0; v < 4; ++v) cm[v] = first_lanes8(t.cols - j0 - 8 * v);
    __m256 acc[kRows][4];
    for (int r = 0; r < kRows; ++r) {
      for (int v = 0; v < 4; ++v) {
        acc[r][v] =
            t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(t.c + r * t.ldc + j0 + 8 * v, cm[v]);
      }
      if (t.first && t.decay_w != nullptr) {  // once per element: scalar is enough
        alignas(32) float start[kChunk] = {};
        for (int j = j0; j < t.cols && j < j0 + kChunk; ++j) start[j - j0] = wgrad_start(t, r, j);
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_load_ps(start + 8 * v);
      }
    }
    for (int s = 0; s < t.slots; ++s) {
      for (int r = 0; r < kRows; ++r) {
        const __m256 w = _mm256_broadcast_ss(t.vals + r * kWgradSlotStride + s);
        const auto* xr =
            reinterpret_cast<const float*>(base + t.offs[r * kWgradSlotStride + s]) + j0;
        for (int v = 0; v < 4; ++v) {
          acc[r][v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xr + 8 * v), acc[r][v]);
        }
      }
    }
    for (int r = 0; r < kRows; ++r) {
      for (int v = 0; v < 4; ++v)
        _mm256_maskstore_ps(t.c + r * t.ldc + j0 + 8 * v, cm[v], acc[r][v]);
    }
  }
}

}  // namespace

void wgrad_tile_avx2(const WgradTileArgs& t) {
  static_assert(kWgradRowTile == 3 && kWgradPanel % kChunk == 0);
  switch (t.rows) {
    case 1:
      tile_rows<1>(t);
      break;
    case 2:
      tile_rows<2>(t);
      break;
    default:
      tile_rows<3>(t);
      break;
  }
}

}  // namespace nms::detail
