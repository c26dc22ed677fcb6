// SparseGPT (include/nmsparse/prune/prune.h has the maths).
//
// Layout. The current block of B columns is held transposed (wt[c][row], one contiguous column
// per c) so that the per-column error spread W_:,k −= e·U_jk is a unit-stride axpy over the rows;
// the B² / 2 axpys of a block cost out·B²/2 FMAs, the lazy update of the columns right of the
// block one sgemm of out × B × (in − block end). Over the layer: out·in·B/2 FMAs in axpys and
// out·in² in GEMMs (4096², B = 128: 1.1 G and 69 G), so the GEMMs dominate and B trades axpy
// work against GEMM efficiency exactly as in the paper.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "hessian.h"
#include "lapack.h"
#include "layer_checks.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/threading.h"

namespace nms {

PruneResult prune_sparsegpt(MatrixViewF w, const LayerCalibration& calibration,
                            const PruneOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  prune_detail::check_layer_shape(w, options);
  prune_detail::check_calibration_fits(w, calibration, true, "sparsegpt");
  const int64_t rows = w.rows();
  const int64_t cols = w.cols();
  const int64_t m = options.pattern.m;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      NMS_CHECK(std::isfinite(w(i, j)), "weight (", i, ", ", j, ") = ", w(i, j), " is not finite");

  // Memory: the double Hessian and its factorisation copy (16 in² bytes) live only until U
  // (4 in² bytes) is built.
  const std::vector<float> u = [&] {
    const prune_detail::DampedHessian hessian =
        prune_detail::damped_hessian(calibration, options.damp);
    for (int64_t j : hessian.dead)  // inputs never seen active: their weights cannot matter
      for (int64_t i = 0; i < rows; ++i) w(i, j) = 0.0f;
    return prune_detail::inverse_hessian_cholesky_upper(hessian, calibration.name, options.damp);
  }();

  // N:M groups must not straddle blocks: the block is a multiple of m.
  const int64_t block = options.structure == PruneStructure::kUnstructured
                            ? options.block
                            : (options.block + m - 1) / m * m;
  PruneResult result;
  result.mask = BitMask(rows, cols);
  // The sweep's parallelism is OpenBLAS's (the lazy GEMMs). The per-group mask solves are small
  // (rows × m): run serially, since idle OpenMP workers spinning between them starve OpenBLAS's
  // threads (measured on 2 cores, 1024 x 1024 row-wise 2:4: 87 ms with 1 thread, 1380 ms with 2).
  const ScopedNumThreads serial_mask_solves(1);
  std::vector<float> wt(static_cast<size_t>(block * rows));   // block columns, transposed
  std::vector<float> err(static_cast<size_t>(block * rows));  // their errors, transposed
  Matrix scores;
  for (int64_t b0 = 0; b0 < cols; b0 += block) {
    const int64_t count = std::min(block, cols - b0);
    for (int64_t c = 0; c < count; ++c)
      for (int64_t i = 0; i < rows; ++i) wt[c * rows + i] = w(i, b0 + c);

    // Unstructured: one mask for the whole block from the scores at its start.
    BitMask block_mask;
    if (options.structure == PruneStructure::kUnstructured) {
      scores = Matrix(rows, count);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < count; ++c) {
          const float d = u[(b0 + c) * cols + b0 + c];
          scores(i, c) = wt[c * rows + i] * wt[c * rows + i] / (d * d);
        }
      block_mask = prune_select_mask(scores.view(), options);
    }
    for (int64_t c = 0; c < count; ++c) {
      const int64_t j = b0 + c;
      if (options.structure != PruneStructure::kUnstructured && c % m == 0) {
        // The mask of columns j..j+m-1 from the current weights: S = w² / U_jj².
        scores = Matrix(rows, m);
        for (int64_t k = 0; k < m; ++k) {
          const float d = u[(j + k) * cols + j + k];
          for (int64_t i = 0; i < rows; ++i)
            scores(i, k) = wt[(c + k) * rows + i] * wt[(c + k) * rows + i] / (d * d);
        }
        block_mask = prune_select_mask(scores.view(), options);
      }
      const int64_t mask_col = options.structure == PruneStructure::kUnstructured ? c : c % m;
      const float d = u[j * cols + j];
      float* col = wt.data() + c * rows;
      float* e = err.data() + c * rows;
      for (int64_t i = 0; i < rows; ++i) {
        const bool keep = block_mask.get(i, mask_col);
        if (keep) result.mask.set(i, j);
        e[i] = keep ? 0.0f : col[i] / d;
        col[i] = keep ? col[i] : 0.0f;
      }
      // Spread the error over the rest of the block.
      const float* urow = u.data() + j * cols;
      for (int64_t k = c + 1; k < count; ++k) {
        const float f = urow[b0 + k];
        if (f == 0.0f) continue;
        float* dst = wt.data() + k * rows;
        for (int64_t i = 0; i < rows; ++i) dst[i] -= e[i] * f;
      }
    }
    for (int64_t c = 0; c < count; ++c)
      for (int64_t i = 0; i < rows; ++i) w(i, b0 + c) = wt[c * rows + i];
    // Lazy update of everything right of the block: W[:, b1:] −= Errᵀ · U[b0:b1, b1:].
    const int64_t b1 = b0 + count;
    if (b1 < cols) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(cols - b1), static_cast<int>(count), -1.0f, err.data(),
                  static_cast<int>(rows), u.data() + b0 * cols + b1, static_cast<int>(cols), 1.0f,
                  w.data() + b1, static_cast<int>(w.ld()));
    }
  }
  prune_detail::zero_pruned(w, result.mask);  // +0.0 everywhere pruned (no -0.0 from updates)
  result.stats = prune_detail::mask_stats(result.mask);
  result.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace nms
