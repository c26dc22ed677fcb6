// Vector-wise N:M masks (see nmsparse/mask/vectorwise.h): block sums of the scores, then the
// row-wise top-n of those sums, broadcast to the block's rows.
#include "nmsparse/mask/vectorwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/mask/standard.h"

namespace nms {

BitMask mask_nm_vectorwise(ConstMatrixViewF scores, NmPattern pattern, int64_t block_rows) {
  pattern.validate();
  NMS_CHECK(block_rows >= 1, "mask_nm_vectorwise: block_rows (", block_rows, ") must be >= 1");
  NMS_CHECK(scores.cols() % pattern.m == 0, "mask_nm_vectorwise: cols (", scores.cols(),
            ") is not a multiple of m (", pattern.m, ") for pattern ", pattern.to_string());
  for (int64_t i = 0; i < scores.rows(); ++i) {
    for (int64_t j = 0; j < scores.cols(); ++j) {
      const float s = scores(i, j);
      NMS_CHECK(std::isfinite(s) && s >= 0.0f, "mask_nm_vectorwise: score (", i, ", ", j, ") = ", s,
                " is not a finite non-negative number");
    }
  }
  const int64_t blocks = (scores.rows() + block_rows - 1) / block_rows;
  Matrix sums(blocks, scores.cols());
  detail::parallel_for(blocks, [&](int64_t b) {
    std::vector<double> acc(static_cast<size_t>(scores.cols()), 0.0);
    const int64_t end = std::min(scores.rows(), (b + 1) * block_rows);
    for (int64_t i = b * block_rows; i < end; ++i) {
      const float* row = scores.row(i);
      for (int64_t j = 0; j < scores.cols(); ++j) acc[static_cast<size_t>(j)] += row[j];
    }
    for (int64_t j = 0; j < scores.cols(); ++j)
      sums(b, j) = static_cast<float>(acc[static_cast<size_t>(j)]);
  });
  const BitMask block_mask = mask_nm_rows(sums.view(), pattern);
  BitMask mask(scores.rows(), scores.cols());
  for (int64_t i = 0; i < scores.rows(); ++i) {
    const int64_t b = i / block_rows;
    for (int64_t j = 0; j < scores.cols(); ++j) {
      if (block_mask.get(b, j)) mask.set(i, j);
    }
  }
  return mask;
}

}  // namespace nms
