// Shape and statistics checks shared by the pruners: each names the layer and the offending value.
#pragma once

#include <string>

#include "nmsparse/core/error.h"
#include "nmsparse/prune/prune.h"

namespace nms::prune_detail {

inline void check_layer_shape(ConstMatrixViewF w, const PruneOptions& options) {
  options.validate();
  const int64_t m = options.pattern.m;
  NMS_CHECK(w.rows() >= 1 && w.cols() >= 1, "cannot prune an empty ", w.rows(), " x ", w.cols(),
            " weight");
  if (options.structure != PruneStructure::kUnstructured)
    NMS_CHECK(w.cols() % m == 0, "the weight has ", w.cols(),
              " input columns, not a multiple of m (", m, ")");
  if (options.structure == PruneStructure::kTransposable)
    NMS_CHECK(w.rows() % m == 0, "the weight has ", w.rows(), " output rows, not a multiple of m (",
              m, ") as a transposable mask needs");
}

inline void check_calibration_fits(ConstMatrixViewF w, const LayerCalibration& c,
                                   bool needs_hessian, const char* method) {
  NMS_CHECK(c.in == w.cols(), "calibration layer '", c.name, "' has in = ", c.in,
            " features but the weight has ", w.cols(), " input columns");
  NMS_CHECK(!needs_hessian || c.has_hessian(), method,
            " needs the Hessian, and calibration layer '", c.name,
            "' has none (calibrate without --no-hessian)");
}

inline void zero_pruned(MatrixViewF w, const BitMask& mask) {
  for (int64_t i = 0; i < w.rows(); ++i)
    for (int64_t j = 0; j < w.cols(); ++j)
      if (!mask.get(i, j)) w(i, j) = 0.0f;
}

inline PruneStats mask_stats(const BitMask& mask) {
  PruneStats s;
  s.kept = mask.count();
  s.density = static_cast<double>(s.kept) / static_cast<double>(mask.rows() * mask.cols());
  return s;
}

}  // namespace nms::prune_detail
