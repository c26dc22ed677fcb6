#include "hessian.h"

#include <algorithm>

#include "lapack.h"
#include "nmsparse/core/error.h"

namespace nms::prune_detail {

DampedHessian damped_hessian(const LayerCalibration& calibration, double damp) {
  NMS_CHECK(calibration.has_hessian(), "calibration layer '", calibration.name, "' has no Hessian");
  const int64_t n = calibration.in;
  DampedHessian out;
  out.in = n;
  out.h.resize(static_cast<size_t>(n * n));
  const double scale = 1.0 / static_cast<double>(calibration.samples);
  for (int64_t k = 0; k < n * n; ++k) out.h[k] = calibration.hessian[k] * scale;
  double mean_diag = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    if (out.h[j * n + j] == 0.0) {
      out.dead.push_back(j);
      out.h[j * n + j] = 1.0;
    }
    mean_diag += out.h[j * n + j];
  }
  mean_diag /= static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) out.h[j * n + j] += damp * mean_diag;
  return out;
}

std::vector<float> inverse_hessian_cholesky_upper(const DampedHessian& hessian,
                                                  const std::string& layer, double damp) {
  const int64_t n = hessian.in;
  NMS_CHECK(n <= (int64_t{1} << 30), "layer '", layer, "': in (", n, ") too large for LAPACK");
  // a = P H P (symmetric, so row- and column-major agree).
  std::vector<double> a(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a[i * n + j] = hessian.h[(n - 1 - i) * n + (n - 1 - j)];
  const int ni = static_cast<int>(n);
  int info = 0;
  dpotrf_("L", &ni, a.data(), &ni, &info, 1);
  NMS_CHECK(info == 0, "layer '", layer,
            "': the dampened Hessian is not positive definite (Cholesky failed at column ",
            n - info, " with damp ", damp, "); try a larger --damp, e.g. 0.1");
  dtrtri_("L", "N", &ni, a.data(), &ni, &info, 1, 1);
  NMS_CHECK(info == 0, "layer '", layer, "': the Cholesky factor is singular at column ", n - info,
            " (damp ", damp, "); try a larger --damp");
  // Column-major lower L⁻¹ at a[r + c*n] (r >= c). V(i, j) = L⁻¹(n-1-i, n-1-j) for i <= j.
  std::vector<float> u(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j)
      u[i * n + j] = static_cast<float>(a[(n - 1 - i) + (n - 1 - j) * n]);
  return u;
}

}  // namespace nms::prune_detail
