#include "nmsparse/mask/verify.h"

#include <bit>
#include <cmath>
#include <vector>

#include "mask/group_bits.h"

namespace nms {

NmVerifyReport verify_nm(const BitMask& kept, NmPattern pattern) {
  pattern.validate();
  const int n = pattern.n;
  const int m = pattern.m;
  NmVerifyReport r;
  r.pattern = pattern;
  r.rows = kept.rows();
  r.cols = kept.cols();
  r.kept = kept.count();
  r.rows_applicable = r.cols % m == 0;
  r.cols_applicable = r.rows % m == 0;
  r.tiles_applicable = r.rows_applicable && r.cols_applicable;

  if (r.rows_applicable) {
    for (int64_t i = 0; i < r.rows; ++i) {
      const uint64_t* words = kept.row_words(i);
      for (int64_t j0 = 0; j0 < r.cols; j0 += m) {
        const int c = std::popcount(detail::read_group_bits(words, j0, m));
        ++r.row_groups;
        r.row_groups_full += c == n;
        if (c > n && r.row_violations++ == 0) r.first_row_violation = {i, j0, c};
      }
    }
  }
  if (r.cols_applicable) {
    std::vector<int> counts(static_cast<size_t>(r.cols));
    std::vector<uint8_t> tile_bad(r.tiles_applicable ? static_cast<size_t>(r.cols / m) : 0);
    for (int64_t i0 = 0; i0 < r.rows; i0 += m) {
      std::fill(counts.begin(), counts.end(), 0);
      std::fill(tile_bad.begin(), tile_bad.end(), 0);
      for (int64_t i = i0; i < i0 + m; ++i) {
        const uint64_t* words = kept.row_words(i);
        for (int64_t w = 0; w < kept.words_per_row(); ++w) {
          for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
            ++counts[static_cast<size_t>(w * 64 + std::countr_zero(bits))];
          }
        }
        if (r.tiles_applicable) {
          for (int64_t b = 0; b < r.cols / m; ++b) {
            if (std::popcount(detail::read_group_bits(words, b * m, m)) > n) tile_bad[b] = 1;
          }
        }
      }
      for (int64_t j = 0; j < r.cols; ++j) {
        const int c = counts[static_cast<size_t>(j)];
        ++r.col_groups;
        r.col_groups_full += c == n;
        if (c > n) {
          if (r.col_violations++ == 0) r.first_col_violation = {i0, j, c};
          if (r.tiles_applicable) tile_bad[static_cast<size_t>(j / m)] = 1;
        }
      }
      for (uint8_t bad : tile_bad) {
        ++r.tiles;
        r.tile_violations += bad;
      }
    }
  }
  return r;
}

BitMask nonzero_mask(ConstMatrixViewF weights) {
  BitMask mask(weights.rows(), weights.cols());
  for (int64_t i = 0; i < weights.rows(); ++i) {
    const float* row = weights.row(i);
    uint64_t* words = mask.row_words(i);
    for (int64_t j = 0; j < weights.cols(); ++j) {
      words[j >> 6] |= static_cast<uint64_t>(row[j] != 0.0f) << (j & 63);
    }
  }
  return mask;
}

NmVerifyReport verify_nm(ConstMatrixViewF weights, NmPattern pattern) {
  return verify_nm(nonzero_mask(weights), pattern);
}

double kept_mass_fraction(ConstMatrixViewF dense, const BitMask& kept) {
  NMS_CHECK(kept.rows() == dense.rows() && kept.cols() == dense.cols(), "mask shape (", kept.rows(),
            " x ", kept.cols(), ") differs from the matrix (", dense.rows(), " x ", dense.cols(),
            ")");
  double total = 0.0;
  double kept_sum = 0.0;
  for (int64_t i = 0; i < dense.rows(); ++i) {
    const float* row = dense.row(i);
    for (int64_t j = 0; j < dense.cols(); ++j) {
      const double a = std::fabs(static_cast<double>(row[j]));
      total += a;
      if (kept.get(i, j)) kept_sum += a;
    }
  }
  return total == 0.0 ? 1.0 : kept_sum / total;
}

}  // namespace nms
