// AVX-512 Bi-Mask backward mask (bimask_backward_avx512.h): per group of m permuted rows and 16
// columns, the forward-kept |W| (-1 for pruned entries, which never outrank a kept one), each
// entry's rank from m · m compares (larger |W|, or equal |W| and a lower permuted offset), and
// keep = forward-kept and rank < n. A NaN compares false both ways, as in the scalar rule. The
// scalar code ranks only the over-full (group, column) pairs, one at a time, reading rows 16 KB
// apart (4096 x 4096 at 2:4: 44 ms, one thread); here every pair costs a few vector operations.
#include "mask/bimask_backward_avx512.h"

#include <immintrin.h>

namespace nms::detail {

namespace {

// kM: the group size when fixed at compile time (4: its loops unroll and the 4 rows' vectors stay
// in registers, 4096 x 4096 at 2:4: 9.1-9.3 -> 4.5-5.1 ms, one thread, Zen 4;
// a software prefetch 1 KB ahead in each row added nothing), 0 for m at run time.
template <int kM>
void backward_group(const float* w, int64_t ld, int64_t cols, const uint64_t* fwd, uint64_t* bwd,
                    int64_t words_per_row, const int64_t* perm, int n, int m_runtime) {
  const int m = kM > 0 ? kM : m_runtime;
  const __m512 minus_one = _mm512_set1_ps(-1.0f);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i limit = _mm512_set1_epi32(n);
  for (int64_t w0 = 0; w0 < words_per_row; ++w0) {
    uint64_t out[16] = {};
    for (int64_t j0 = w0 * 64; j0 < cols && j0 < w0 * 64 + 64; j0 += 16) {
      const int64_t count = cols - j0 < 16 ? cols - j0 : 16;
      const auto present = static_cast<__mmask16>(count == 16 ? 0xFFFFu : (1u << count) - 1u);
      const int shift = static_cast<int>(j0 & 63);
      __m512 a[16];
      __mmask16 kept[16];
      for (int r = 0; r < m; ++r) {
        const int64_t row = perm[r];
        kept[r] = static_cast<__mmask16>((fwd[row * words_per_row + w0] >> shift) & present);
        const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(kept[r], w + row * ld + j0));
        a[r] = _mm512_mask_blend_ps(kept[r], minus_one, v);
      }
      for (int r = 0; r < m; ++r) {
        __m512i rank = _mm512_setzero_si512();
        for (int q = 0; q < m; ++q) {
          if (q == r) continue;
          __mmask16 above = _mm512_cmp_ps_mask(a[q], a[r], _CMP_GT_OQ);
          if (q < r) above |= _mm512_cmp_ps_mask(a[q], a[r], _CMP_EQ_OQ);
          rank = _mm512_mask_add_epi32(rank, above, rank, one);
        }
        const __mmask16 keep = kept[r] & _mm512_cmplt_epi32_mask(rank, limit);
        out[r] |= static_cast<uint64_t>(keep) << shift;
      }
    }
    for (int r = 0; r < m; ++r) bwd[perm[r] * words_per_row + w0] = out[r];
  }
}

}  // namespace

void bimask_backward_group_avx512(const float* w, int64_t ld, int64_t cols, const uint64_t* fwd,
                                  uint64_t* bwd, int64_t words_per_row, const int64_t* perm, int n,
                                  int m) {
  if (m == 4) return backward_group<4>(w, ld, cols, fwd, bwd, words_per_row, perm, n, m);
  backward_group<0>(w, ld, cols, fwd, bwd, words_per_row, perm, n, m);
}

}  // namespace nms::detail
