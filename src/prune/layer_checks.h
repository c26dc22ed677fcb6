// Shape and statistics checks shared by the pruners: each names the layer and the offending value.
#pragma once

#include <algorithm>
#include <cstdint>
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

// Writes +0.0 wherever the mask is clear, a 64-bit mask word at a time (a full word skips 64).
inline void zero_pruned(MatrixViewF w, const BitMask& mask) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < w.rows(); ++i) {
    const uint64_t* words = mask.row_words(i);
    float* row = w.row(i);
    for (int64_t j0 = 0; j0 < w.cols(); j0 += 64) {
      const uint64_t word = words[j0 / 64];
      const int64_t len = std::min<int64_t>(64, w.cols() - j0);
      if (len == 64 && word == ~uint64_t{0}) continue;
      for (int64_t b = 0; b < len; ++b)
        if (((word >> b) & 1) == 0) row[j0 + b] = 0.0f;
    }
  }
}

inline PruneStats mask_stats(const BitMask& mask) {
  PruneStats s;
  s.kept = mask.count();
  s.density = static_cast<double>(s.kept) / static_cast<double>(mask.rows() * mask.cols());
  return s;
}

}  // namespace nms::prune_detail
