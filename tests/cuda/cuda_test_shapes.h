// Shared by the CUDA backend's tests (host bodies and device): score matrices and the shapes
// around the tile and word edges.
#pragma once

#include <cmath>
#include <cstdint>

#include "nmsparse/core/aligned_buffer.h"

namespace nms::testing {

inline Matrix abs_of(Matrix a) {
  for (int64_t k = 0; k < a.size(); ++k) a.data()[k] = std::fabs(a.data()[k]);
  return a;
}

struct CudaShape {
  int n, m;
  int64_t rows, cols;
};
// One tile; m not dividing 64 (tiles straddle mask words); several words per row; the largest m;
// 1:2 and n == m.
inline constexpr CudaShape kCudaShapes[] = {{2, 4, 4, 4},     {2, 4, 68, 132},  {1, 4, 8, 260},
                                            {4, 8, 72, 136},  {3, 7, 21, 70},   {5, 12, 24, 96},
                                            {8, 16, 48, 208}, {16, 32, 64, 96}, {20, 64, 64, 128},
                                            {1, 2, 6, 130},   {4, 4, 8, 8}};

}  // namespace nms::testing
