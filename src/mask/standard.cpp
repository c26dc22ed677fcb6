#include "nmsparse/mask/standard.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "core/parallel.h"
#include "mask/group_bits.h"
#ifdef NMS_HAVE_AVX512_KERNELS
#include "mask/standard_avx512.h"
#endif
#include "nmsparse/core/isa.h"

namespace nms {
namespace {

// Rows per parallel chunk: 16 rows of a 4096-wide matrix are 256 KiB of fp32, enough to amortise
// scheduling and small enough to balance 2 threads on a 64-row matrix.
constexpr int64_t kRowsPerChunk = 16;

// Bits of the kept elements of one group, by rank counting: O(m^2) branch-free compares, which
// the compiler fully unrolls for a compile-time M. For 2:4 this is 12 compares per group.
template <int M>
inline uint64_t group_topn_fixed(const float* s, int n) {
  uint64_t bits = 0;
  for (int a = 0; a < M; ++a) {
    int rank = 0;
    for (int b = 0; b < M; ++b) {
      rank += static_cast<int>((s[b] > s[a]) | ((s[b] == s[a]) & (b < a)));
    }
    bits |= static_cast<uint64_t>(rank < n) << a;
  }
  return bits;
}

inline uint64_t group_topn_ranked(const float* s, int n, int m) {
  uint64_t bits = 0;
  for (int a = 0; a < m; ++a) {
    int rank = 0;
    for (int b = 0; b < m; ++b)
      rank += static_cast<int>((s[b] > s[a]) | ((s[b] == s[a]) & (b < a)));
    bits |= static_cast<uint64_t>(rank < n) << a;
  }
  return bits;
}

// m > 16: partial selection of the n best (score descending, index ascending).
inline uint64_t group_topn_select(const float* s, int n, int m, std::vector<int>& order) {
  order.resize(m);
  for (int k = 0; k < m; ++k) order[k] = k;
  auto better = [s](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  if (n < m) std::nth_element(order.begin(), order.begin() + n, order.end(), better);
  uint64_t bits = 0;
  for (int k = 0; k < n; ++k) bits |= uint64_t{1} << order[k];
  return bits;
}

#if defined(__SSE2__)
// Groups of M in {4, 8, 16, 32} (any n) with SSE2, which every x86-64 CPU has, 4 groups per step.
// The 4 groups' scores are transposed in 4 x 4 blocks so that lane g of vector k holds element k
// of group g; the rank of element k is then M - 1 compares and adds over the other vectors, with
// the lower-index tie rule in the choice of >= (l < k) or > (l > k). Keep flags are transposed
// back and read out with movemask. Work per element: about 2(M - 1)/4 vector operations.
// Single thread, 4096 x 4096 fp32 on the development machine (bench_mask_pack, BM_Mask): 2:4 went
// from 1.4 GB/s (scalar rank counting per group) to 5.2 GB/s, 4:8 from 0.29 GB/s.
//
// Validation rides along: `invalid` collects "not >= 0" (negative or NaN) lanes, one OR per
// vector, so no separate pass over the row is needed.
template <bool kAbs, int M>
int64_t mask_row_sse2(const float* row, int64_t cols, int n, uint64_t* words, bool& valid) {
  static_assert(M % 4 == 0 && M <= 32);
  const __m128 sign = _mm_set1_ps(-0.0f);
  const __m128 zero = _mm_setzero_ps();
  const __m128i minus_n = _mm_set1_epi32(-n);
  __m128 invalid = _mm_setzero_ps();
  int64_t j = 0;
  for (; j + 4 * M <= cols; j += 4 * M) {
    __m128 v[M];
    for (int c = 0; c < M; c += 4) {
      __m128 a = _mm_loadu_ps(row + j + c);
      __m128 b = _mm_loadu_ps(row + j + M + c);
      __m128 d = _mm_loadu_ps(row + j + 2 * M + c);
      __m128 e = _mm_loadu_ps(row + j + 3 * M + c);
      if (kAbs) {
        a = _mm_andnot_ps(sign, a);
        b = _mm_andnot_ps(sign, b);
        d = _mm_andnot_ps(sign, d);
        e = _mm_andnot_ps(sign, e);
      }
      invalid =
          _mm_or_ps(invalid, _mm_or_ps(_mm_or_ps(_mm_cmpnge_ps(a, zero), _mm_cmpnge_ps(b, zero)),
                                       _mm_or_ps(_mm_cmpnge_ps(d, zero), _mm_cmpnge_ps(e, zero))));
      _MM_TRANSPOSE4_PS(a, b, d, e);
      v[c] = a;
      v[c + 1] = b;
      v[c + 2] = d;
      v[c + 3] = e;
    }
    __m128 keep[M];
    for (int k = 0; k < M; ++k) {
      __m128i minus_rank = _mm_setzero_si128();  // each compare adds -1 where l beats k
      for (int l = 0; l < M; ++l) {
        if (l == k) continue;
        const __m128 beats = l < k ? _mm_cmpge_ps(v[l], v[k]) : _mm_cmpgt_ps(v[l], v[k]);
        minus_rank = _mm_add_epi32(minus_rank, _mm_castps_si128(beats));
      }
      keep[k] = _mm_castsi128_ps(_mm_cmpgt_epi32(minus_rank, minus_n));  // rank < n
    }
    uint64_t bits[4] = {0, 0, 0, 0};
    for (int c = 0; c < M; c += 4) {
      _MM_TRANSPOSE4_PS(keep[c], keep[c + 1], keep[c + 2], keep[c + 3]);  // group-major again
      for (int g = 0; g < 4; ++g) {
        bits[g] |= static_cast<uint64_t>(_mm_movemask_ps(keep[c + g])) << c;
      }
    }
    for (int g = 0; g < 4; ++g) detail::or_group_bits(words, j + g * M, M, bits[g]);
  }
  valid = _mm_movemask_ps(invalid) == 0;
  return j;  // columns done; the caller validates and finishes the tail
}
#endif

// True when every score of the row is valid: >= 0 after the transform (so neither negative nor
// NaN). Branch-free, so the common all-valid row costs one streaming pass.
template <bool kAbs>
bool row_scores_valid(const float* row, int64_t cols) {
  bool bad = false;
  for (int64_t j = 0; j < cols; ++j) bad |= !((kAbs ? std::fabs(row[j]) : row[j]) >= 0.0f);
  return !bad;
}

template <bool kAbs>
[[noreturn]] void throw_invalid_score(const float* row, int64_t i, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    if (kAbs) {
      NMS_CHECK(!std::isnan(row[j]), "weight (", i, ", ", j, ") is NaN");
    } else {
      NMS_CHECK(row[j] >= 0.0f, "score (", i, ", ", j, ") is ", row[j],
                "; scores must be non-negative and not NaN");
    }
  }
  NMS_ASSERT(false, "row ", i, " was reported invalid but no invalid score was found");
}

// One row, groups of a compile-time M (0 = runtime m) from column j0 on.
template <bool kAbs, int M>
void mask_row_groups(const float* row, int64_t j0, int64_t cols, int n, int m, uint64_t* words,
                     std::vector<int>& order) {
  float s[kMaxGroupSize];
  for (int64_t j = j0; j < cols; j += m) {
    for (int k = 0; k < m; ++k) s[k] = kAbs ? std::fabs(row[j + k]) : row[j + k];
    uint64_t bits;
    if constexpr (M != 0) {
      bits = group_topn_fixed<M>(s, n);
    } else {
      bits = m <= 16 ? group_topn_ranked(s, n, m) : group_topn_select(s, n, m, order);
    }
    detail::or_group_bits(words, j, m, bits);
  }
}

template <bool kAbs>
void mask_rows_impl(ConstMatrixViewF src, NmPattern pattern, BitMask& mask) {
  const int n = pattern.n;
  const int m = pattern.m;
  const int64_t cols = src.cols();
  const int64_t chunks = (src.rows() + kRowsPerChunk - 1) / kRowsPerChunk;
  [[maybe_unused]] const bool avx512 = isa_active() == Isa::kAvx512;  // groups of 4
  detail::parallel_for(chunks, [&](int64_t chunk) {
    std::vector<int> order;
    const int64_t i_end = std::min(src.rows(), (chunk + 1) * kRowsPerChunk);
    for (int64_t i = chunk * kRowsPerChunk; i < i_end; ++i) {
      const float* row = src.row(i);
      uint64_t* words = mask.row_words(i);
      int64_t done = 0;  // columns validated and masked by a vector path
      bool valid = true;
      bool vector_done = false;
#ifdef NMS_HAVE_AVX512_KERNELS
      if (m == 4 && avx512) {
        done = detail::mask_row4_avx512(row, cols, n, kAbs, words, valid);
        vector_done = true;
      }
#endif
#if defined(__SSE2__)
      switch (vector_done ? 0 : m) {
        case 4:
          done = mask_row_sse2<kAbs, 4>(row, cols, n, words, valid);
          break;
        case 8:
          done = mask_row_sse2<kAbs, 8>(row, cols, n, words, valid);
          break;
        case 16:
          done = mask_row_sse2<kAbs, 16>(row, cols, n, words, valid);
          break;
        case 32:
          done = mask_row_sse2<kAbs, 32>(row, cols, n, words, valid);
          break;
        default:
          break;
      }
#endif
      if (!valid || !row_scores_valid<kAbs>(row + done, cols - done)) {
        throw_invalid_score<kAbs>(row, i, cols);
      }
      switch (m) {
        case 2:
          mask_row_groups<kAbs, 2>(row, 0, cols, n, m, words, order);
          break;
        case 4:
          mask_row_groups<kAbs, 4>(row, done, cols, n, m, words, order);
          break;
        case 8:
          mask_row_groups<kAbs, 8>(row, done, cols, n, m, words, order);
          break;
        case 16:
          mask_row_groups<kAbs, 16>(row, done, cols, n, m, words, order);
          break;
        default:  // m == 32 resumes after its vector path; other m start at 0
          mask_row_groups<kAbs, 0>(row, done, cols, n, m, words, order);
      }
    }
  });
}

BitMask mask_rows(ConstMatrixViewF src, NmPattern pattern, bool magnitude) {
  pattern.validate();
  NMS_CHECK(src.cols() % pattern.m == 0, "cols (", src.cols(), ") is not a multiple of m (",
            pattern.m, ") for pattern ", pattern.to_string());
  BitMask mask(src.rows(), src.cols());
  if (magnitude) {
    mask_rows_impl<true>(src, pattern, mask);
  } else {
    mask_rows_impl<false>(src, pattern, mask);
  }
  return mask;
}

}  // namespace

BitMask mask_nm_rows(ConstMatrixViewF scores, NmPattern pattern) {
  return mask_rows(scores, pattern, false);
}

BitMask mask_nm_magnitude(ConstMatrixViewF weights, NmPattern pattern) {
  return mask_rows(weights, pattern, true);
}

void apply_mask(MatrixViewF weights, const BitMask& mask) {
  NMS_CHECK(mask.rows() == weights.rows() && mask.cols() == weights.cols(), "mask shape (",
            mask.rows(), " x ", mask.cols(), ") differs from the weights (", weights.rows(), " x ",
            weights.cols(), ")");
  detail::parallel_for(weights.rows(), [&](int64_t i) {
    float* row = weights.row(i);
    const uint64_t* words = mask.row_words(i);
    for (int64_t j = 0; j < weights.cols(); ++j) {
      if (((words[j >> 6] >> (j & 63)) & 1U) == 0) row[j] = 0.0f;
    }
  });
}

}  // namespace nms
