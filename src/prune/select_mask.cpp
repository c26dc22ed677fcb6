// Mask selection by structure, the names of the methods, structures and solvers, options
// validation, and the one-call dispatcher (include/nmsparse/prune/prune.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "nmsparse/core/error.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "nmsparse/prune/prune.h"

namespace nms {

std::string_view prune_method_name(PruneMethod method) {
  switch (method) {
    case PruneMethod::kMagnitude:
      return "magnitude";
    case PruneMethod::kWanda:
      return "wanda";
    case PruneMethod::kSparseGpt:
      return "sparsegpt";
    case PruneMethod::kAdaPrune:
      return "adaprune";
  }
  return "?";
}

std::optional<PruneMethod> prune_method_from_name(std::string_view name) {
  for (PruneMethod m : {PruneMethod::kMagnitude, PruneMethod::kWanda, PruneMethod::kSparseGpt,
                        PruneMethod::kAdaPrune})
    if (prune_method_name(m) == name) return m;
  return std::nullopt;
}

std::string_view prune_structure_name(PruneStructure structure) {
  switch (structure) {
    case PruneStructure::kRowwise:
      return "rowwise";
    case PruneStructure::kTransposable:
      return "transposable";
    case PruneStructure::kUnstructured:
      return "unstructured";
  }
  return "?";
}

void PruneOptions::validate() const {
  pattern.validate();
  NMS_CHECK(std::isfinite(damp) && damp > 0.0, "damp (", damp, ") must be finite and > 0");
  NMS_CHECK(block >= 1 && block <= (int64_t{1} << 20), "block (", block,
            ") must be in [1, 1048576]");
  NMS_CHECK(iterations >= 0 && iterations <= 100'000'000, "iterations (", iterations,
            ") must be in [0, 1e8]");
  NMS_CHECK(std::isfinite(lr) && lr > 0.0, "lr (", lr, ") must be finite and > 0");
  NMS_CHECK(std::isfinite(bias_lr) && bias_lr > 0.0, "bias_lr (", bias_lr,
            ") must be finite and > 0");
}

namespace {

// Per row, the top round(cols·n/m) scores (ties to the lower index).
BitMask select_unstructured(ConstMatrixViewF scores, NmPattern pattern) {
  const int64_t keep = std::llround(static_cast<double>(scores.cols()) * pattern.density());
  BitMask mask(scores.rows(), scores.cols());
#pragma omp parallel
  {
    std::vector<int64_t> order(static_cast<size_t>(scores.cols()));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < scores.rows(); ++i) {
      const float* row = scores.row(i);
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [row](int64_t a, int64_t b) { return row[a] > row[b]; });
      for (int64_t k = 0; k < keep; ++k) mask.set(i, order[k]);
    }
  }
  return mask;
}

}  // namespace

BitMask prune_select_mask(ConstMatrixViewF scores, const PruneOptions& options) {
  const NmPattern p = options.pattern;
  switch (options.structure) {
    case PruneStructure::kRowwise:
      return mask_nm_rows(scores, p);
    case PruneStructure::kUnstructured: {
      for (int64_t i = 0; i < scores.rows(); ++i)
        for (int64_t j = 0; j < scores.cols(); ++j)
          NMS_CHECK(std::isfinite(scores(i, j)) && scores(i, j) >= 0.0f, "score (", i, ", ", j,
                    ") = ", scores(i, j), " (scores are finite and >= 0)");
      return select_unstructured(scores, p);
    }
    case PruneStructure::kTransposable:
      return mask_transposable(scores, p, options.solver).mask;
  }
  NMS_THROW("unknown prune structure");
}

PruneResult prune_layer(PruneMethod method, MatrixViewF w, std::span<float> bias,
                        const LayerCalibration* calibration, const PruneOptions& options) {
  if (method == PruneMethod::kMagnitude) return prune_magnitude(w, options);
  NMS_CHECK(calibration != nullptr, prune_method_name(method),
            " needs calibration statistics (nmsparse calibrate, or examples/calibrate_torch.py)");
  switch (method) {
    case PruneMethod::kWanda:
      return prune_wanda(w, *calibration, options);
    case PruneMethod::kSparseGpt:
      return prune_sparsegpt(w, *calibration, options);
    case PruneMethod::kAdaPrune:
      return prune_adaprune(w, bias, *calibration, options);
    case PruneMethod::kMagnitude:
      break;
  }
  NMS_THROW("unknown prune method");
}

}  // namespace nms
