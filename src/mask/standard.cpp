#include "nmsparse/mask/standard.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "mask/group_bits.h"

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

// Scores of one row, transformed (identity or |.|) into a scratch buffer, with validation.
template <bool kAbs>
void mask_rows_impl(ConstMatrixViewF src, NmPattern pattern, BitMask& mask) {
  const int n = pattern.n;
  const int m = pattern.m;
  const int64_t groups = src.cols() / m;
  const int64_t chunks = (src.rows() + kRowsPerChunk - 1) / kRowsPerChunk;
  detail::parallel_for(chunks, [&](int64_t chunk) {
    std::vector<float> scores(static_cast<size_t>(src.cols()));
    std::vector<int> order;
    const int64_t i_end = std::min(src.rows(), (chunk + 1) * kRowsPerChunk);
    for (int64_t i = chunk * kRowsPerChunk; i < i_end; ++i) {
      const float* row = src.row(i);
      bool bad = false;
      for (int64_t j = 0; j < src.cols(); ++j) {
        const float s = kAbs ? std::fabs(row[j]) : row[j];
        bad |= !(s >= 0.0f);  // negative or NaN
        scores[j] = s;
      }
      if (bad) {
        for (int64_t j = 0; j < src.cols(); ++j) {
          if (kAbs) {
            NMS_CHECK(!std::isnan(row[j]), "weight (", i, ", ", j, ") is NaN");
          } else {
            NMS_CHECK(scores[j] >= 0.0f, "score (", i, ", ", j, ") is ", scores[j],
                      "; scores must be non-negative and not NaN");
          }
        }
      }
      uint64_t* words = mask.row_words(i);
      const float* s = scores.data();
      for (int64_t g = 0; g < groups; ++g, s += m) {
        uint64_t bits;
        switch (m) {
          case 2:
            bits = group_topn_fixed<2>(s, n);
            break;
          case 4:
            bits = group_topn_fixed<4>(s, n);
            break;
          case 8:
            bits = group_topn_fixed<8>(s, n);
            break;
          case 16:
            bits = group_topn_fixed<16>(s, n);
            break;
          default:
            bits = m <= 16 ? group_topn_ranked(s, n, m) : group_topn_select(s, n, m, order);
        }
        detail::or_group_bits(words, g * m, m, bits);
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
