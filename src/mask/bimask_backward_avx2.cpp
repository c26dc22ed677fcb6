// AVX2 Bi-Mask backward mask (bimask_backward_avx2.h): the AVX-512 unit's rule
// (bimask_backward_avx512.cpp) on 8 columns per step. Per group of m permuted rows the forward-kept
// |W| (-1 for pruned entries, which never outrank a kept one), each entry's rank from m · m
// compares (larger |W|, or equal |W| and a lower permuted offset), and keep = forward-kept and
// rank < n. A NaN compares false both ways, as in the scalar rule. 4096 x 4096 at 2:4, one thread,
// Zen 2: see bimask.cpp.
#include "mask/bimask_backward_avx2.h"

#include <immintrin.h>

namespace nms::detail {

void bimask_backward_group_avx2(const float* w, int64_t ld, int64_t cols, const uint64_t* fwd,
                                uint64_t* bwd, int64_t words_per_row, const int64_t* perm, int n,
                                int m) {
  const __m256 minus_one = _mm256_set1_ps(-1.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i limit = _mm256_set1_epi32(n);
  for (int64_t w0 = 0; w0 < words_per_row; ++w0) {
    uint64_t out[16] = {};
    for (int64_t j0 = w0 * 64; j0 < cols && j0 < w0 * 64 + 64; j0 += 8) {
      const int64_t count = cols - j0 < 8 ? cols - j0 : 8;
      const uint32_t present = (1u << count) - 1u;
      const int shift = static_cast<int>(j0 & 63);
      __m256 a[16];
      uint32_t kept[16];
      for (int r = 0; r < m; ++r) {
        const int64_t row = perm[r];
        kept[r] = static_cast<uint32_t>((fwd[row * words_per_row + w0] >> shift) & present);
        const __m256i lanes = _mm256_cmpeq_epi32(
            _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(kept[r])), lane_bit), lane_bit);
        const __m256 v = _mm256_and_ps(_mm256_maskload_ps(w + row * ld + j0, lanes), abs_mask);
        a[r] = _mm256_blendv_ps(minus_one, v, _mm256_castsi256_ps(lanes));
      }
      for (int r = 0; r < m; ++r) {
        __m256i rank = _mm256_setzero_si256();
        for (int q = 0; q < m; ++q) {
          if (q == r) continue;
          __m256 above = _mm256_cmp_ps(a[q], a[r], _CMP_GT_OQ);
          if (q < r) above = _mm256_or_ps(above, _mm256_cmp_ps(a[q], a[r], _CMP_EQ_OQ));
          rank = _mm256_sub_epi32(rank, _mm256_castps_si256(above));  // +1 where above
        }
        const auto below = static_cast<uint32_t>(
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(limit, rank))));
        out[r] |= static_cast<uint64_t>(kept[r] & below) << shift;
      }
    }
    for (int r = 0; r < m; ++r) bwd[perm[r] * words_per_row + w0] = out[r];
  }
}

}  // namespace nms::detail
