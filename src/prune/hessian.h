// The dampened Hessian of a layer and the upper Cholesky factor of its inverse, as SparseGPT and
// the reconstruction error use them.
#pragma once

#include <cstdint>
#include <vector>

#include "nmsparse/prune/calibration.h"

namespace nms::prune_detail {

// H = XᵀX / samples in double, with "dead" inputs (H_jj == 0: the feature was 0 on every
// calibration sample) given H_jj = 1 so that the factorisation exists; `dead` lists them.
// Then H += damp · mean(diag H) · I.
struct DampedHessian {
  std::vector<double> h;  // [in * in] row-major
  std::vector<int64_t> dead;
  int64_t in = 0;
};
DampedHessian damped_hessian(const LayerCalibration& calibration, double damp);

// U upper triangular with H⁻¹ = UᵀU (row-major float [in * in]; the strict lower part is 0),
// computed without forming H⁻¹: with P the order-reversing permutation, factor PHP = L Lᵀ
// (dpotrf); then H⁻¹ = P L⁻ᵀ L⁻¹ P = VᵀV with V = P L⁻¹ P upper triangular (dtrtri gives L⁻¹).
// Two in³/3-flop LAPACK calls in double instead of the three of potrf + potri + potrf.
// Throws (naming the layer and the damp) when H is not positive definite.
std::vector<float> inverse_hessian_cholesky_upper(const DampedHessian& hessian,
                                                  const std::string& layer, double damp);

}  // namespace nms::prune_detail
