// PRIVATE header: code compiled both by the host compiler and by nvcc for the GPU.
//
// A routine marked NMS_HD is one implementation of a per-tile or per-group step that the CPU
// library and the CUDA backend (src/cuda, NMSPARSE_CUDA=ON) both run, so the two agree by
// construction and the host tests of the routine cover the GPU's arithmetic too. Such code uses
// only what both sides have: fixed-size arrays, <math.h> float/double functions and integer
// arithmetic (no std containers, no exceptions, no allocation). nvcc is run with -fmad=false and
// the host without contraction of the ISA units, so a*b+c rounds twice on both.
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define NMS_HD __host__ __device__
#else
#define NMS_HD
#endif

// Full unrolling of a constant-trip loop in device code, where an array indexed by the loop
// variable must stay in registers (nvcc otherwise keeps it in local memory); nothing on the host.
#if defined(__CUDA_ARCH__)
#define NMS_HD_UNROLL _Pragma("unroll")
#else
#define NMS_HD_UNROLL
#endif

namespace nms::detail {

// isfinite without <cmath>'s host-only overloads: false for NaN and +-Inf.
NMS_HD inline bool finite_hd(float x) {
  return fabsf(x) <= 3.40282347e+38f;
}
NMS_HD inline bool finite_hd(double x) {
  return fabs(x) <= 1.7976931348623157e+308;
}

// Number of trailing zero bits of a nonzero word.
NMS_HD inline int ctz64_hd(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(x)) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

NMS_HD inline int popcount64_hd(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

}  // namespace nms::detail
