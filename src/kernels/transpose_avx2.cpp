// AVX2 16 x 16 fp32 block of transpose_into: four 8 x 8 in-register transposes.
#include "kernels/transpose_avx2.h"

#include <immintrin.h>

#include "kernels/transpose8_avx2.h"

namespace nms::detail {

void transpose16_avx2(const float* const rows[16], float* dst, int64_t ld_dst, bool stream) {
  for (int kb = 0; kb < 16; kb += 8) {
    for (int jb = 0; jb < 16; jb += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows[kb + i] + jb);
      transpose8(r);
      float* d = dst + jb * ld_dst + kb;
      if (stream) {
        for (int i = 0; i < 8; ++i) _mm256_stream_ps(d + i * ld_dst, r[i]);
      } else {
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(d + i * ld_dst, r[i]);
      }
    }
  }
}

void stream_fence_avx2() {
  _mm_sfence();
}

}  // namespace nms::detail
