// PRIVATE header: whether two matrix views' address ranges intersect (for the aliasing checks of
// kernels whose output must not overlap an input). Conservative: views into the same rows of one
// buffer count as overlapping even when their columns are disjoint.
#pragma once

#include "nmsparse/core/matrix_view.h"

namespace nms::detail {

inline bool views_overlap(ConstMatrixViewF a, ConstMatrixViewF b) {
  if (a.rows() == 0 || a.cols() == 0 || b.rows() == 0 || b.cols() == 0) return false;
  const float* a_end = a.data() + (a.rows() - 1) * a.ld() + a.cols();
  const float* b_end = b.data() + (b.rows() - 1) * b.ld() + b.cols();
  return a.data() < b_end && b.data() < a_end;
}

}  // namespace nms::detail
