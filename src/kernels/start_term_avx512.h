// PRIVATE header, AVX-512 translation units only (it uses their target flags): SR-STE's start term
// of the weight-gradient kernels' Yᵀ tiles (nm_gemm_lanes_avx512.cpp, nm_gemm_bf16_avx512.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace nms::detail {

// λ · w[j] where keep[j] == 0, 0 where it is not, for the lanes j of tm (the others 0): 8 floats
// of one row of W and their mask bytes.
inline __m256 start_term8(const float* w, const uint8_t* keep, __mmask8 tm, __m256 lambda) {
  const __m256 wv = _mm256_maskz_loadu_ps(tm, w);
  const __m256i k = _mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8(tm, keep));
  return _mm256_maskz_mul_ps(_mm256_mask_testn_epi32_mask(tm, k, k), lambda, wv);
}

}  // namespace nms::detail
