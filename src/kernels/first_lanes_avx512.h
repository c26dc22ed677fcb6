// PRIVATE header, AVX-512 translation units only (it uses their target flags): the mask of the
// first `count` of 16 lanes, for the kernels' partial rows, columns and tiles.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace nms::detail {

// Lanes 0 .. count − 1 (all 16 for count >= 16, none for count <= 0).
inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

}  // namespace nms::detail
