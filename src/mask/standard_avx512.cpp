// AVX-512 groups of 4 for mask_nm_rows / mask_nm_magnitude (standard_avx512.h). Each zmm holds 4
// groups; in-lane rotations bring every other member of an element's group into its lane, and
// element i loses to member q when s_q > s_i, or s_q == s_i and q < i (the lower index wins ties,
// as group_topn_fixed). For rotation k, q = (i + k) mod 4 is the lower index exactly in the lanes
// with i mod 4 >= 4 - k, which take >= instead of >. The rank (losses, 0..3) is compared with n
// through the three loss masks. The SSE2 kernel ran at 1.7 GB/s on this Xeon (4096 x 4096, one
// thread; memcpy 12 GB/s).
#include "mask/standard_avx512.h"

#include <immintrin.h>

namespace nms::detail {

int64_t mask_row4_avx512(const float* row, int64_t cols, int n, bool abs, uint64_t* words,
                         bool& valid) {
  const __m512 zero = _mm512_setzero_ps();
  constexpr __mmask16 kTies[4] = {0, 0x8888, 0xCCCC, 0xEEEE};  // lanes where q < i, rotation k
  __mmask16 invalid = 0;
  int64_t j = 0;
  for (; j + 64 <= cols; j += 64) {
    uint64_t word = 0;
    for (int c = 0; c < 4; ++c) {
      __m512 s = _mm512_loadu_ps(row + j + 16 * c);
      if (abs) s = _mm512_abs_ps(s);
      invalid |= _mm512_cmp_ps_mask(s, zero, _CMP_NGE_UQ);
      const __m512 rot[4] = {s, _mm512_permute_ps(s, 0x39), _mm512_permute_ps(s, 0x4E),
                             _mm512_permute_ps(s, 0x93)};  // lane i <- member (i + k) mod 4
      __mmask16 lost[4];
      for (int k = 1; k < 4; ++k) {
        lost[k] = (_mm512_cmp_ps_mask(rot[k], s, _CMP_GT_OQ) & static_cast<__mmask16>(~kTies[k])) |
                  (_mm512_cmp_ps_mask(rot[k], s, _CMP_GE_OQ) & kTies[k]);
      }
      const __mmask16 one = lost[1] | lost[2] | lost[3];
      const __mmask16 two = (lost[1] & lost[2]) | (lost[1] & lost[3]) | (lost[2] & lost[3]);
      const __mmask16 three = lost[1] & lost[2] & lost[3];
      const __mmask16 keep = n >= 4   ? static_cast<__mmask16>(0xFFFF)
                             : n == 3 ? static_cast<__mmask16>(~three)
                             : n == 2 ? static_cast<__mmask16>(~two)
                                      : static_cast<__mmask16>(~one);
      word |= static_cast<uint64_t>(keep) << (16 * c);
    }
    words[j >> 6] |= word;
  }
  valid = invalid == 0;
  return j;
}

}  // namespace nms::detail
