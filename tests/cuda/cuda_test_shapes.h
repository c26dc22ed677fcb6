// Shared by the CUDA backend's tests (host bodies and device): the shapes around the tile and
// word edges.
#pragma once

#include <cstdint>

namespace nms::testing {

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
