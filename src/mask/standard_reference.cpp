#include "mask/standard_reference.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace nms::reference {

BitMask mask_nm_rows(ConstMatrixViewF scores, NmPattern pattern) {
  NMS_CHECK(scores.cols() % pattern.m == 0, "cols not a multiple of m");
  BitMask mask(scores.rows(), scores.cols());
  std::vector<int64_t> order(static_cast<size_t>(pattern.m));
  for (int64_t i = 0; i < scores.rows(); ++i) {
    for (int64_t j0 = 0; j0 < scores.cols(); j0 += pattern.m) {
      std::iota(order.begin(), order.end(), j0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return scores(i, a) > scores(i, b); });
      for (int k = 0; k < pattern.n; ++k) mask.set(i, order[static_cast<size_t>(k)]);
    }
  }
  return mask;
}

}  // namespace nms::reference
