// Magnitude and Wanda pruning: score, select, zero (include/nmsparse/prune/prune.h).
#include <chrono>
#include <cmath>

#include "layer_checks.h"
#include "nmsparse/core/aligned_buffer.h"

namespace nms {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

PruneResult select_and_zero(MatrixViewF w, const Matrix& scores, const PruneOptions& options,
                            std::chrono::steady_clock::time_point t0) {
  PruneResult r;
  r.mask = prune_select_mask(scores.view(), options);
  prune_detail::zero_pruned(w, r.mask);
  r.stats = prune_detail::mask_stats(r.mask);
  r.stats.seconds = seconds_since(t0);
  return r;
}

void check_finite(ConstMatrixViewF w) {
  for (int64_t i = 0; i < w.rows(); ++i)
    for (int64_t j = 0; j < w.cols(); ++j)
      NMS_CHECK(std::isfinite(w(i, j)), "weight (", i, ", ", j, ") = ", w(i, j), " is not finite");
}

}  // namespace

PruneResult prune_magnitude(MatrixViewF w, const PruneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  prune_detail::check_layer_shape(w, options);
  check_finite(w);
  Matrix scores(w.rows(), w.cols());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < w.rows(); ++i)
    for (int64_t j = 0; j < w.cols(); ++j) scores(i, j) = std::fabs(w(i, j));
  return select_and_zero(w, scores, options, t0);
}

PruneResult prune_wanda(MatrixViewF w, const LayerCalibration& calibration,
                        const PruneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  prune_detail::check_layer_shape(w, options);
  prune_detail::check_calibration_fits(w, calibration, false, "wanda");
  check_finite(w);
  Matrix scores(w.rows(), w.cols());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < w.rows(); ++i)
    for (int64_t j = 0; j < w.cols(); ++j)
      scores(i, j) =
          static_cast<float>(std::fabs(static_cast<double>(w(i, j))) * calibration.act_norm[j]);
  return select_and_zero(w, scores, options, t0);
}

}  // namespace nms
