// N:M pruning of neural gradients: the minimum-variance unbiased estimator (MVUE) and baselines.
//
// Used on dY in the weight-gradient GEMM dW = dY^T X (dY [tokens, out]): the groups of m run along
// the reduction axis, tokens, i.e. down the columns of dY (NmAxis::kCols). NmAxis::kRows groups
// along each row. Chmiel et al., "Minimum variance unbiased N:M sparsity for the neural gradients"
// (ICLR 2023); research/algorithms.md §2.7.
//
// The maths, for one group g in R^m, a_i = |g_i|, keeping at most n:
//   kMvue  Unbiased (E[ĝ] = g) with the least total variance E‖ĝ − g‖². A kept element is worth
//          g_i / p_i (p_i its inclusion probability), so Σ Var = Σ a_i² (1/p_i − 1) depends only
//          on the marginals, and is minimised under Σ p_i = n, p_i <= 1 by the water-filling
//          p_i = min(1, λ a_i). Groups with <= n nonzeros are kept exactly (p = 1, zero variance).
//          Otherwise the largest magnitudes are capped (p = 1, kept exactly) while
//          a_max · n' >= R (n' = n − capped, R = Σ of the uncapped a); the rest have
//          p_i = n' a_i / R and are drawn by systematic sampling: with one uniform U per group,
//          the elements covering the points (U + j) R / n', j = 0 .. n'−1, on the uncapped a's laid
//          end to end (prefix sums in index order). Each sampled element is worth sign(g_i) R / n'.
//          Closed forms: 1:2 keeps g_1 with probability a_1 / (a_1 + a_2), value
//          sign · (a_1 + a_2); 2:4 either p_i = 2 a_i / S, value sign · S / 2, or (when
//          a_max >= S − a_max) keeps the max exactly and one of the other three ∝ a, value
//          sign · (S − a_max). The 2:4 kernel (SSE2, 4 groups per vector, one Philox block per 4
//          groups) computes exactly these float operations, bit-identical to the generic path.
//   kMvueApprox24  2:4 only: first index drawn ∝ a, second from the other three ∝ a, each kept
//          value scaled by its exact Horvitz–Thompson inclusion probability
//          p_i = a_i/S + a_i Σ_{j≠i} (a_j/S) / (S − a_j). Unbiased; its variance is ~1.3× the MVUE
//          on random blocks (what the paper's experiments used; for comparison only).
//   kTopN  The biased deterministic baseline: keep the n largest magnitudes (ties: lower index).
//
// Invariants of every result: at most n nonzeros per group; a zero group stays zero; pruned and
// zero entries are +0.0; every kept value is nonzero and has the sign of its input; the compressed
// output equals nm_compress(dense output) bit for bit.
//
// Randomness: CounterRng(seed, stream). `stream` identifies the tensor (the CLI uses
// tensor_stream_id(name), FNV-1a 64 of the name). The counter is the group id:
//   kRows: gid = r · (cols / m) + c / m   (= floor(e / m) for the row-major element index e)
//   kCols: gid = (r / m) · cols + c
// for the group's first element (r, c). kMvue uses word gid (uniform = word >> 8 · 2^-24, so 4
// groups share one Philox block); kMvueApprox24 uses words 2·gid and 2·gid+1. Results are
// therefore a function of (seed, stream, element index) only: bitwise identical for any thread
// count, and rows of a tensor of identical rows get independent draws.
//
// Errors (nms::Error): invalid pattern (n > m, ...), m not dividing the grouped axis, shape
// mismatch of the output, kMvueApprox24 with a pattern other than 2:4, a NaN or Inf input (the
// message names the element's (row, col) and value), or a group whose magnitude sum overflows fp32.
//
// Complexity: O(rows · cols) time, O(1) extra memory per thread (m <= 64), parallel over rows
// (kRows) or column strips (kCols). 2:4 kMvue is vectorised (SSE2, and AVX-512 for both axes);
// other kMvue patterns along columns (the token axis of dY) run an AVX-512 kernel that performs
// the per-group routine's float operations in lanes of 16 groups (8192 x 3072 fp32, one thread:
// 4:8 175 ms compressed / 44 ms dense, from 540 ms); the rest run the scalar per-group routine
// (sorting m magnitudes for the water-filling / top-n). Every path is bitwise the scalar one.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

enum class GradMethod { kMvue, kMvueApprox24, kTopN };

// "mvue" / "mvue-approx24" / "topn".
std::string_view grad_method_name(GradMethod method);
// Inverse of grad_method_name; nullopt for anything else.
std::optional<GradMethod> grad_method_from_name(std::string_view name);

struct GradPruneOptions {
  GradMethod method = GradMethod::kMvue;
  NmPattern pattern{2, 4};
  NmAxis axis = NmAxis::kRows;
  uint64_t seed = 0;
  uint64_t stream = 0;  // tensor id, e.g. tensor_stream_id(name)
};

// FNV-1a 64 of the bytes of `name` (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t tensor_stream_id(std::string_view name);

// Masked dense result into `out` (same shape as g, any ld; may not alias g).
void grad_prune_into(ConstMatrixViewF g, const GradPruneOptions& options, MatrixViewF out);
Matrix grad_prune(ConstMatrixViewF g, const GradPruneOptions& options);

// The same result directly in compressed form (canonical, as nm_compress would produce from the
// dense result), with no dense intermediate. `dst` buffers are reused when their sizes fit.
void grad_prune_compressed_into(ConstMatrixViewF g, const GradPruneOptions& options,
                                CompressedNm& dst);
CompressedNm grad_prune_compressed(ConstMatrixViewF g, const GradPruneOptions& options);

// Water-filled MVUE inclusion probabilities of one group (a[0..m) magnitudes >= 0, finite):
// p_i = min(1, λ a_i) with Σ p = min(n, nonzeros); zeros get 0. Computed in double; for tests,
// analysis and reports (the pruners use the float arithmetic described above).
void mvue_probabilities(const double* a, int m, int n, double* p);

// Exact inclusion probabilities of kMvueApprox24 for one group of 4 magnitudes (double).
void mvue_approx24_probabilities(const double* a, double* p);

}  // namespace nms
