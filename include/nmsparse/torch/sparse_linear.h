// SparseLinear: a drop-in for torch::nn::Linear whose three training GEMMs can run N:M sparse.
//
// For x [T, in] (leading dimensions flattened), W [out, in], b [out]:
//   forward        Y  = X (M_f ⊙ W)ᵀ + b
//   backward-data  dX = dY (M_b ⊙ W)
//   weight-grad    dW = prune(dY)ᵀ X + λ (1 − M_f) ⊙ W      (straight-through to the dense W)
//   bias-grad      db = Σ_t dY[t, :]                          (never pruned)
// (with bf16 inputs, the operands of every sparse GEMM rounded to bf16 first: X, dY and the masked
// weights of forward and backward-data, prune(dY) and X of the weight gradient; GemmInputs below)
// with, per weight mode,
//   dense         M_f = M_b = 1
//   nm            M_f = row-wise N:M of |W| along `in`, recomputed every step (SR-STE);
//                 M_b = M_f, so backward-data is the exact gradient but not N:M along `out`
//                 (it runs dense).
//   transposable  M_f = M_b = a transposable N:M mask of |W| (N:M along `in` and along `out`),
//                 re-solved every `refresh_every` steps with the chosen solver (between refreshes
//                 the mask is held fixed).
//   bimask        M_f = row-wise N:M of |W| every step; M_b ⊆ M_f N:M along `out` in the row order
//                 of a permutation searched every `bimask_every` steps among the identity and
//                 `bimask_candidates` random candidates (Bi-Mask; dX is an approximation).
// and prune(dY) = dY (grads dense) or the N:M pruning of dY along the token axis (groups of m
// consecutive tokens per output feature) by MVUE (unbiased), its 2:4 approximation, or top-N
// (biased baseline). When T is not a multiple of m the last T mod m tokens are not pruned. The
// decay term is SR-STE's; it applies to every sparse weight mode (λ = `decay`, 0 disables it).
//
// Two execution paths with the same maths and the same random draws (grad_prune's counter-based
// RNG keyed by (seed, layer stream, step)): `reference` masks dense tensors and calls LibTorch
// GEMMs (any float dtype, used as the oracle); `kernels` compresses the operands and runs nm_gemm /
// nm_wgrad (fp32). Masks live in buffers (mask_fwd, mask_bwd as uint8, perm, step and mask_step as
// int64), so a module's state_dict / checkpoint carries them. Bi-Mask on the kernel path gives
// mask_fwd a new storage at every training forward (the call keeps the old one for its backward):
// hold the tensor, not a pointer to its data.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/mask/transposable.h"

namespace nms {

enum class WeightMode { kDense, kNm, kTransposable, kBiMask };
enum class GradMode { kDense, kMvue, kMvueApprox24, kTopN };
enum class ExecPath { kReference, kKernels };
// The inputs of the sparse GEMMs: forward and backward-data (transposable and bimask weights; the
// forward only for nm) and the weight gradient (grads other than dense): fp32, or rounded to bf16
// (round to nearest even) with fp32 accumulation (nm_gemm_bf16 and nm_wgrad_bf16 on the kernel
// path, kernels/nm_gemm_bf16.h and nm_wgrad_bf16.h; the reference path rounds the operands and
// multiplies in fp32). Weights, gradients, MVUE, the decay term and the dense GEMMs stay fp32.
enum class GemmInputs { kFp32, kBf16 };

// Names as on the command line: dense|nm|transposable|bimask, dense|mvue|mvue-approx24|topn,
// reference|kernels (the solver names are mask/transposable.h's). The *_from_name functions return
// nullopt otherwise.
std::string_view weight_mode_name(WeightMode mode);
std::optional<WeightMode> weight_mode_from_name(std::string_view name);
std::string_view grad_mode_name(GradMode mode);
std::optional<GradMode> grad_mode_from_name(std::string_view name);
std::string_view exec_path_name(ExecPath path);
std::optional<ExecPath> exec_path_from_name(std::string_view name);
std::string_view gemm_inputs_name(GemmInputs inputs);  // "fp32" / "bf16"
std::optional<GemmInputs> gemm_inputs_from_name(std::string_view name);

struct SparseLinearConfig {
  WeightMode weights = WeightMode::kDense;
  GradMode grads = GradMode::kDense;
  NmPattern pattern{2, 4};       // of the weights (along `in`, and along `out` when transposable)
  NmPattern grad_pattern{2, 4};  // of dY along tokens
  ExecPath path = ExecPath::kKernels;
  float decay = 2e-4f;  // SR-STE λ
  TransposableSolver solver = TransposableSolver::kExact;
  int refresh_every = 40;       // transposable: steps between mask solves
  int bimask_every = 100;       // bimask: steps between permutation searches
  int bimask_candidates = 100;  // bimask: random permutations per search (besides the identity)
  uint64_t seed = 0;            // of the gradient pruning and the permutation candidates
  GemmInputs inputs = GemmInputs::kFp32;

  // Throws nms::Error naming the offending field (patterns, intervals, decay, mvue-approx24 with a
  // grad pattern other than 2:4, bf16 inputs with a pattern of a sparse GEMM, weights' or
  // gradients', whose m does not divide 32 or, on the kernel path, on a CPU without AVX512_BF16).
  void validate() const;
  // One line, e.g. "bimask 2:4 / mvue 2:4 / kernels".
  std::string describe() const;
};

// Why a [out, in] layer cannot take `config` (empty when it can): `in` not a multiple of m, `out`
// not a multiple of m for transposable and bimask.
std::string sparse_linear_unsupported_reason(int64_t in, int64_t out,
                                             const SparseLinearConfig& config);

struct SparseLinearOptions {
  SparseLinearOptions(int64_t in, int64_t out) : in_features(in), out_features(out) {}
  int64_t in_features;
  int64_t out_features;
  bool bias = true;
  SparseLinearConfig config;  // dense by default: then exactly torch::nn::Linear
};

class SparseLinearImpl : public torch::nn::Cloneable<SparseLinearImpl> {
 public:
  SparseLinearImpl(int64_t in, int64_t out) : SparseLinearImpl(SparseLinearOptions(in, out)) {}
  explicit SparseLinearImpl(SparseLinearOptions options);

  void reset() override;    // registers the parameters and buffers
  void reset_parameters();  // torch::nn::Linear's initialisation
  void pretty_print(std::ostream& stream) const override;

  // x [..., in] -> [..., out].
  torch::Tensor forward(const torch::Tensor& x);

  // Called by every forward() before any computation with the layer's input as a 2-D
  // [tokens, in] float32 contiguous tensor, detached (leading dimensions flattened; a copy only
  // when x is not already so). Calibration uses it to gather input statistics. An empty function
  // removes the observer; unset, forward() pays one branch. clone() copies it.
  using InputObserver = std::function<void(const torch::Tensor&)>;
  void set_input_observer(InputObserver observer) { input_observer_ = std::move(observer); }
  bool has_input_observer() const { return static_cast<bool>(input_observer_); }

  // Switches the modes; validates, and throws (leaving the layer unchanged) when the shape does
  // not admit the config. Masks are recomputed at the next training step.
  void configure(const SparseLinearConfig& config);
  const SparseLinearConfig& config() const { return options_.config; }
  const SparseLinearOptions& options() const { return options_; }

  // Stream id of this layer's gradient-pruning RNG (set by sparsify from the layer's name; each
  // layer must have its own).
  void set_stream(uint64_t stream) { stream_ = stream; }
  uint64_t stream() const { return stream_; }

  // The weight as the forward pass sees it, M_f ⊙ W (masks up to date as of the last step), and
  // the backward-data weight M_b ⊙ W.
  torch::Tensor effective_weight() const;
  torch::Tensor backward_weight() const;
  // Fraction of M_f that M_b keeps (1 unless bimask).
  double backward_retained() const;

  torch::Tensor weight;    // [out, in]
  torch::Tensor bias;      // [out] (undefined without bias)
  torch::Tensor mask_fwd;  // [out, in] uint8 buffer
  torch::Tensor mask_bwd;  // [out, in] uint8 buffer
  torch::Tensor perm;      // [out] int64 buffer (bimask)
  torch::Tensor step;      // [] int64 buffer: training steps taken
  // [] int64 buffer: the step at which the held masks (transposable) or the permutation (bimask)
  // were last computed; -1 = never (after configure()). A checkpoint restores it, so a resumed run
  // refreshes at the same steps as an uninterrupted one.
  torch::Tensor mask_step;

 private:
  SparseLinearOptions options_;
  uint64_t stream_ = 0;
  InputObserver input_observer_;
  std::shared_ptr<struct SparseLinearWorkspace> workspace_;  // reused compression buffers
  friend struct SparseLinearAccess;
};
TORCH_MODULE(SparseLinear);

// Wall time spent inside SparseLinear layers since the last reset, by kind of work (seconds,
// summed over layers; the training loop reports it per epoch).
struct SparseLinearProfile {
  double forward_gemm = 0;
  double backward_data_gemm = 0;
  double weight_grad_gemm = 0;  // kernel path: with the pruning of dY (nm_wgrad_pruned fuses it)
  double mask_update = 0;       // mask solves, permutation search
  double operand_prep = 0;      // compression, packing, masking of W; reference path: pruning dY
};
SparseLinearProfile sparse_linear_profile();
void sparse_linear_profile_reset();

}  // namespace nms
