// Relative reconstruction error from calibration statistics (include/nmsparse/prune/prune.h):
//   ‖ΔX + δ1ᵀ‖² = Σ_rows Δ_r H Δ_rᵀ + 2 Σ_r δ_r Δ_r·s + samples·‖δ‖²   (s = input_sum)
// and the same with (W, b) for the dense output; the quadratic forms via one dsymm-free pass
// per row (H is read in double, O(out·in²)).
#include <cmath>
#include <vector>

#include "lapack.h"
#include "nmsparse/core/error.h"
#include "nmsparse/prune/prune.h"

namespace nms {
namespace {

// Σ_rows a_r H a_rᵀ + 2 Σ_r c_r a_r·s + samples·‖c‖² for a = rows × in (float), c = bias or empty.
double output_energy(const std::vector<float>& a, std::span<const float> c, int64_t rows,
                     const LayerCalibration& cal, const std::vector<float>& h) {
  const int64_t in = cal.in;
  std::vector<float> ah(static_cast<size_t>(rows * in));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(in), static_cast<int>(in), 1.0f, a.data(), static_cast<int>(in),
              h.data(), static_cast<int>(in), 0.0f, ah.data(), static_cast<int>(in));
  double total = 0.0;
  for (int64_t k = 0; k < rows * in; ++k)
    total += static_cast<double>(a[k]) * static_cast<double>(ah[k]);
  if (!c.empty()) {
    for (int64_t r = 0; r < rows; ++r) {
      double dot = 0.0;
      for (int64_t j = 0; j < in; ++j) dot += static_cast<double>(a[r * in + j]) * cal.input_sum[j];
      total += 2.0 * c[r] * dot + static_cast<double>(cal.samples) * c[r] * c[r];
    }
  }
  return std::max(total, 0.0);
}

}  // namespace

double reconstruction_error(ConstMatrixViewF dense, ConstMatrixViewF pruned,
                            const LayerCalibration& calibration, std::span<const float> dense_bias,
                            std::span<const float> pruned_bias) {
  NMS_CHECK(dense.rows() == pruned.rows() && dense.cols() == pruned.cols(),
            "reconstruction_error: dense ", dense.rows(), " x ", dense.cols(), " vs pruned ",
            pruned.rows(), " x ", pruned.cols());
  NMS_CHECK(calibration.in == dense.cols() && calibration.has_hessian(),
            "reconstruction_error needs the Hessian of a layer with ", dense.cols(),
            " inputs (calibration layer '", calibration.name, "' has in = ", calibration.in, ")");
  const int64_t rows = dense.rows();
  const int64_t in = dense.cols();
  const bool with_bias = !dense_bias.empty() && !pruned_bias.empty() && calibration.has_input_sum();
  if (with_bias)
    NMS_CHECK(static_cast<int64_t>(dense_bias.size()) == rows &&
                  static_cast<int64_t>(pruned_bias.size()) == rows,
              "reconstruction_error: biases must have ", rows, " values");
  std::vector<float> h(calibration.hessian.begin(), calibration.hessian.end());
  std::vector<float> a(static_cast<size_t>(rows * in));
  std::vector<float> delta(static_cast<size_t>(rows * in));
  std::vector<float> bias_delta(with_bias ? static_cast<size_t>(rows) : 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      a[i * in + j] = dense(i, j);
      delta[i * in + j] = dense(i, j) - pruned(i, j);
    }
    if (with_bias) bias_delta[i] = dense_bias[i] - pruned_bias[i];
  }
  const double num = output_energy(delta, bias_delta, rows, calibration, h);
  const double den =
      output_energy(a, with_bias ? dense_bias : std::span<const float>(), rows, calibration, h);
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

}  // namespace nms
