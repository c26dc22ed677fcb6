// PRIVATE header: whether two matrix views' address ranges intersect (any element types) (for the
// aliasing checks of kernels whose output must not overlap an input). Conservative: views into the
// same rows of one buffer count as overlapping even when their columns are disjoint.
#pragma once

#include "nmsparse/core/matrix_view.h"

namespace nms::detail {

template <class A, class B>
bool views_overlap(MatrixView<A> a, MatrixView<B> b) {
  if (a.rows() == 0 || a.cols() == 0 || b.rows() == 0 || b.cols() == 0) return false;
  const auto* a_begin = reinterpret_cast<const char*>(a.data());
  const auto* b_begin = reinterpret_cast<const char*>(b.data());
  const auto* a_end = reinterpret_cast<const char*>(a.data() + (a.rows() - 1) * a.ld() + a.cols());
  const auto* b_end = reinterpret_cast<const char*>(b.data() + (b.rows() - 1) * b.ld() + b.cols());
  return a_begin < b_end && b_begin < a_end;
}

}  // namespace nms::detail
