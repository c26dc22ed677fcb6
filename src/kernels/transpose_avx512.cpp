// AVX-512 16 x 16 fp32 block of transpose_into (the in-register transpose of transpose16_avx512.h).
#include "kernels/transpose_avx512.h"

#include <immintrin.h>

#include "kernels/transpose16_avx512.h"

namespace nms::detail {

void transpose16_avx512(const float* const rows[16], float* dst, int64_t ld_dst, bool stream) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(rows[i]);
  transpose16(r);
  if (stream) {
    for (int i = 0; i < 16; ++i) _mm512_stream_ps(dst + i * ld_dst, r[i]);
  } else {
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ld_dst, r[i]);
  }
}

void stream_fence_avx512() {
  _mm_sfence();
}

}  // namespace nms::detail
