// AdaPrune from calibration statistics (include/nmsparse/prune/prune.h has the objective).
//
// With x̃ = [x; 1], W̃ = [W b] and G̃ = Σ x̃x̃ᵀ / samples (the Hessian, input_sum and 1 in its
// last row and column), the output MSE of Ŵ̃ is  L = tr(Δ G̃ Δᵀ) / out  with Δ = Ŵ̃ − W̃, and its
// gradient is  ∇L = 2 Δ G̃ / out  (one sgemm of out × in' × in' per step, in' = in + 1 with a
// bias). Pruned weights have their gradient and Adam state held at 0, so they stay 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "lapack.h"
#include "layer_checks.h"
#include "nmsparse/core/aligned_buffer.h"

namespace nms {
namespace {

// tr(Δ G Δᵀ) / out, with `grad` = Δ G as scratch (rows × n).
double output_mse(const std::vector<float>& delta, const std::vector<float>& gram,
                  std::vector<float>& grad, int64_t rows, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(n), static_cast<int>(n), 1.0f, delta.data(), static_cast<int>(n),
              gram.data(), static_cast<int>(n), 0.0f, grad.data(), static_cast<int>(n));
  double trace = 0.0;
  for (int64_t k = 0; k < rows * n; ++k)
    trace += static_cast<double>(delta[k]) * static_cast<double>(grad[k]);
  return trace / static_cast<double>(rows);
}

}  // namespace

PruneResult prune_adaprune(MatrixViewF w, std::span<float> bias,
                           const LayerCalibration& calibration, const PruneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  prune_detail::check_layer_shape(w, options);
  prune_detail::check_calibration_fits(w, calibration, true, "adaprune");
  const int64_t rows = w.rows();
  const int64_t in = w.cols();
  NMS_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == rows, "adaprune: bias has ",
            bias.size(), " values, the weight ", rows, " rows");
  const bool tune_bias = !bias.empty() && calibration.has_input_sum();
  const int64_t n = in + (tune_bias ? 1 : 0);

  // Magnitude mask of the chosen structure, then mean absorption per row group of m.
  const Matrix dense = [&] {
    Matrix copy(rows, in);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < in; ++j) copy(i, j) = w(i, j);
    return copy;
  }();
  PruneResult result = prune_magnitude(w, options);
  const int64_t m = options.pattern.m;
  const int64_t group = options.structure == PruneStructure::kUnstructured ? in : m;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t g = 0; g < in; g += group) {
      const int64_t len = std::min(group, in - g);
      double pruned_sum = 0.0;
      int64_t kept = 0;
      for (int64_t j = g; j < g + len; ++j) {
        if (result.mask.get(i, j))
          ++kept;
        else
          pruned_sum += dense(i, j);
      }
      if (kept == 0) continue;
      const auto add = static_cast<float>(pruned_sum / static_cast<double>(kept));
      for (int64_t j = g; j < g + len; ++j)
        if (result.mask.get(i, j)) w(i, j) += add;
    }
  }

  // G̃ (float, n × n) and the targets W̃.
  const double inv = 1.0 / static_cast<double>(calibration.samples);
  std::vector<float> gram(static_cast<size_t>(n * n));
  for (int64_t a = 0; a < in; ++a)
    for (int64_t b = 0; b < in; ++b)
      gram[a * n + b] = static_cast<float>(calibration.hessian[a * in + b] * inv);
  if (tune_bias) {
    for (int64_t a = 0; a < in; ++a) {
      gram[a * n + in] = static_cast<float>(calibration.input_sum[a] * inv);
      gram[in * n + a] = gram[a * n + in];
    }
    gram[in * n + in] = 1.0f;
  }
  std::vector<float> target(static_cast<size_t>(rows * n));
  std::vector<float> current(static_cast<size_t>(rows * n));
  std::vector<float> lr(static_cast<size_t>(n), static_cast<float>(options.lr));
  std::vector<uint8_t> trainable(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      target[i * n + j] = dense(i, j);
      current[i * n + j] = w(i, j);
      trainable[i * n + j] = result.mask.get(i, j) ? 1 : 0;
    }
    if (tune_bias) {
      target[i * n + in] = bias[i];
      current[i * n + in] = bias[i];
      trainable[i * n + in] = 1;
    }
  }
  if (tune_bias) lr[in] = static_cast<float>(options.bias_lr);

  std::vector<float> delta(static_cast<size_t>(rows * n));
  std::vector<float> grad(static_cast<size_t>(rows * n));
  std::vector<float> m1(static_cast<size_t>(rows * n), 0.0f);
  std::vector<float> m2(static_cast<size_t>(rows * n), 0.0f);
  const auto update_delta = [&] {
    for (int64_t k = 0; k < rows * n; ++k) delta[k] = current[k] - target[k];
  };
  update_delta();
  result.stats.loss_before = output_mse(delta, gram, grad, rows, n);
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;  // Adam's defaults, as the paper
  double beta1_t = 1.0, beta2_t = 1.0;
  const float scale = 2.0f / static_cast<float>(rows);
  for (int64_t step = 0; step < options.iterations; ++step) {
    if (step > 0) output_mse(delta, gram, grad, rows, n);  // grad = Δ G̃ (step 0: computed above)
    beta1_t *= kBeta1;
    beta2_t *= kBeta2;
    const auto c1 = static_cast<float>(1.0 / (1.0 - beta1_t));
    const auto c2 = static_cast<float>(1.0 / (1.0 - beta2_t));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = i * n + j;
        if (!trainable[k]) continue;
        const float g = scale * grad[k];
        m1[k] = static_cast<float>(kBeta1) * m1[k] + static_cast<float>(1 - kBeta1) * g;
        m2[k] = static_cast<float>(kBeta2) * m2[k] + static_cast<float>(1 - kBeta2) * g * g;
        current[k] -= lr[j] * (m1[k] * c1) / (std::sqrt(m2[k] * c2) + static_cast<float>(kEps));
        delta[k] = current[k] - target[k];
      }
    }
  }
  result.stats.loss_after =
      options.iterations > 0 ? output_mse(delta, gram, grad, rows, n) : result.stats.loss_before;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < in; ++j) w(i, j) = result.mask.get(i, j) ? current[i * n + j] : 0.0f;
    if (tune_bias) bias[i] = current[i * n + in];
  }
  result.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace nms
