// Post-training pruning of one linear layer W [out, in] (y = W x + b) to N:M, transposable N:M or
// unstructured sparsity at density n/m, from its weights and (for every method but magnitude) the
// calibration statistics of its inputs (calibration.h). Every pruner works in place on W, returns
// the mask it kept (1 = kept; every pruned weight is +0.0 afterwards), and streams nothing: memory
// is one layer plus its Hessian.
//
// Structures (how a score matrix S [out, in] becomes a mask; ties always to the lower index):
//   rowwise       top-n of every m consecutive scores along `in` (mask_nm_rows).
//   transposable  every m x m tile keeps <= n per row and column (mask/transposable.h; the chosen
//                 solver). Needs out % m == 0 as well.
//   unstructured  top round(k·n/m) of every row of k scores (same density in every row; for
//                 SparseGPT per row within each block of `block` columns).
//
// Methods:
//   magnitude  S = |W|.
//   wanda      S_ij = |W_ij| · ‖X_j‖₂ (Sun et al. 2023), from act_norm. Kept weights unchanged.
//   sparsegpt  OBS column sweep with weight updates (Frantar & Alistarh 2023): with
//              H = XᵀX/samples + λI (λ = damp · mean diag) and the upper Cholesky factor U of H⁻¹
//              (H⁻¹ = UᵀU), columns are processed left to right; on reaching a column j with
//              j % m == 0 the mask of columns j..j+m-1 is chosen from S = W_:,j..² / U_jj² (the
//              current, already-updated weights), then every column j is quantised to its mask and
//              the error e = (w_j − q_j)/U_jj is spread over the later columns: W_:,k −= e·U_jk.
//              Updates beyond the current block of `block` columns are applied lazily, one GEMM
//              per block. Cost: one Cholesky + one triangular inverse (in³/3 flops each, double),
//              out·in² flops of updates (float, OpenBLAS), plus the mask solves.
//   adaprune   (Hubara et al. 2021) start from the magnitude mask of the chosen structure, absorb
//              each row group's pruned sum into its kept weights (the group sum is kept), then run
//              Adam on the kept weights (and the bias, when given with input_sum) to minimise the
//              output MSE  (1/out)·E_x‖(Ŵ − W)x + (b̂ − b)‖²  =  (1/out)·tr(Δ̃ H̃ Δ̃ᵀ)/samples, with
//              H̃ the Gram matrix of [x; 1]. The gradient is the exact full-batch gradient from the
//              calibration Hessian (the paper samples 50 cached inputs per step; the expectation
//              is the same). Needs the Hessian.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/mask/transposable.h"
#include "nmsparse/prune/calibration.h"

namespace nms {

enum class PruneMethod { kMagnitude, kWanda, kSparseGpt, kAdaPrune };
enum class PruneStructure { kRowwise, kTransposable, kUnstructured };

std::string_view prune_method_name(PruneMethod method);  // "magnitude" | "wanda" | ...
std::optional<PruneMethod> prune_method_from_name(std::string_view name);
std::string_view prune_structure_name(PruneStructure structure);  // "rowwise" | ...

struct PruneOptions {
  NmPattern pattern{2, 4};
  PruneStructure structure = PruneStructure::kRowwise;
  TransposableSolver solver = TransposableSolver::kExact;
  // sparsegpt
  double damp = 0.01;   // λ = damp · mean(diag(XᵀX/samples)); > 0
  int64_t block = 128;  // lazy-update block (columns); rounded up to a multiple of m
  // adaprune
  int64_t iterations = 1000;
  double lr = 1e-3;       // Adam step of the weights (the paper's)
  double bias_lr = 1e-2;  // Adam step of the bias (the paper's)

  void validate() const;  // throws nms::Error naming the field
};

struct PruneStats {
  int64_t kept = 0;
  double density = 0;
  double seconds = 0;
  double loss_before = 0;  // adaprune: output MSE after mean absorption, before Adam
  double loss_after = 0;   // adaprune: output MSE at the end
};

struct PruneResult {
  BitMask mask;
  PruneStats stats;
};

// The mask of `scores` (finite, >= 0) under options.structure and pattern. Shapes that the
// structure does not divide are errors naming the dimension.
BitMask prune_select_mask(ConstMatrixViewF scores, const PruneOptions& options);

// Throws unless w's shape fits options (cols % m; rows % m for transposable) and, when given,
// calibration.in == w.cols().
PruneResult prune_magnitude(MatrixViewF w, const PruneOptions& options);
PruneResult prune_wanda(MatrixViewF w, const LayerCalibration& calibration,
                        const PruneOptions& options);
// Needs calibration.hessian. A Hessian that is not positive definite after dampening is an error
// naming the layer and suggesting a larger damp.
PruneResult prune_sparsegpt(MatrixViewF w, const LayerCalibration& calibration,
                            const PruneOptions& options);
// `bias` (out values, or empty) is tuned too when calibration has input_sum.
PruneResult prune_adaprune(MatrixViewF w, std::span<float> bias,
                           const LayerCalibration& calibration, const PruneOptions& options);

// One call for any method (magnitude ignores `calibration`, which may be null for it).
PruneResult prune_layer(PruneMethod method, MatrixViewF w, std::span<float> bias,
                        const LayerCalibration* calibration, const PruneOptions& options);

// Relative output error on the calibration inputs, from the statistics alone:
//   ‖(W−Ŵ)X + (b−b̂)1ᵀ‖_F / ‖WX + b1ᵀ‖_F
// (bias terms only when both biases are given and calibration has input_sum). Needs the Hessian.
// 0 when the dense output is 0 and the pruned one too.
double reconstruction_error(ConstMatrixViewF dense, ConstMatrixViewF pruned,
                            const LayerCalibration& calibration,
                            std::span<const float> dense_bias = {},
                            std::span<const float> pruned_bias = {});

}  // namespace nms
