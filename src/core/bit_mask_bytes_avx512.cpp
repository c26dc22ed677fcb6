// AVX-512 byte <-> bit rows of a BitMask (bit_mask_bytes_avx512.h).
#include "core/bit_mask_bytes_avx512.h"

#include <immintrin.h>

namespace nms::detail {

void mask_row_to_bytes_avx512(const uint64_t* words, int64_t cols, uint8_t* out) {
  const __m512i one = _mm512_set1_epi8(1);
  int64_t j = 0;
  for (; j + 64 <= cols; j += 64) {
    _mm512_storeu_si512(out + j, _mm512_maskz_mov_epi8(words[j >> 6], one));
  }
  if (j < cols) {
    const __mmask64 tail = (uint64_t{1} << (cols - j)) - 1;
    _mm512_mask_storeu_epi8(out + j, tail, _mm512_maskz_mov_epi8(words[j >> 6], one));
  }
}

void mask_row_from_bytes_avx512(const uint8_t* in, int64_t cols, uint64_t* words) {
  int64_t j = 0;
  for (; j + 64 <= cols; j += 64) {
    const __m512i v = _mm512_loadu_si512(in + j);
    words[j >> 6] = _mm512_test_epi8_mask(v, v);
  }
  if (j < cols) {
    const __mmask64 tail = (uint64_t{1} << (cols - j)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(tail, in + j);
    words[j >> 6] = _mm512_test_epi8_mask(v, v);
  }
}

}  // namespace nms::detail
