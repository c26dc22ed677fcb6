// SparseLinear's autograd function: the mask updates of each weight mode and the three GEMMs on
// the reference path (masked dense LibTorch GEMMs) and the kernel path (nm_gemm / nm_wgrad on
// compressed operands). The maths is in the header comment of nmsparse/torch/sparse_linear.h.
//
// Per training step s of a layer (the `step` buffer before the forward):
//   1. masks: nm and bimask recompute M_f = top-n of |W| per group; transposable re-solves when
//      s − mask_step ≥ refresh_every; bimask searches the permutation when s − mask_step ≥
//      bimask_every and rebuilds M_b from M_f and the held permutation otherwise.
//   2. forward GEMM; the step's masks and RNG key (seed, stream, s) are captured for the backward.
//   3. step ← s + 1.
// Evaluation (no grad or eval mode) uses the held masks and computes them only if there are none.
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/error.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/kernels/nm_wgrad.h"
#include "nmsparse/kernels/nm_wgrad_bf16.h"
#include "nmsparse/kernels/transpose.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "nmsparse/torch/sparse_linear.h"
#include "torch/sparse_linear_internal.h"

namespace nms {

using SharedBits = std::shared_ptr<const BitMask>;

// Buffers reused from step to step (one per layer): after the first step a kernel-path step
// allocates only its output tensors.
struct SparseLinearWorkspace {
  BitMask mask_t;            // (P M_b)ᵀ
  int64_t mask_t_step = -2;  // transposable: mask_step and mask_bwd version mask_t was made from
  int64_t mask_t_version = -1;
  // Transposable weights hold their masks between refreshes: the step's snapshot of the mask
  // buffer (never written after it is made, so a pending backward can share it) and its bits are
  // made once per held mask, keyed by the buffer's mask_step, version counter and storage.
  torch::Tensor mask_snapshot;
  SharedBits mask_bits;
  int64_t snapshot_step = -2;
  int64_t snapshot_version = -1;
  const void* snapshot_storage = nullptr;
  NmGemmOperand forward_operand;           // M_f ⊙ W
  NmGemmOperand backward_operand;          // (P (M_b ⊙ W))ᵀ
  NmGemmBf16Operand forward_operand_bf16;  // the same two for nm_gemm_bf16 (bf16 inputs)
  NmGemmBf16Operand backward_operand_bf16;
  NmWgradWorkspace wgrad;
  NmWgradBf16Workspace wgrad_bf16;  // bf16 inputs
};

struct SparseLinearAccess {
  static SparseLinearWorkspace& workspace(SparseLinearImpl& layer) {
    if (!layer.workspace_) layer.workspace_ = std::make_shared<SparseLinearWorkspace>();
    return *layer.workspace_;
  }
};

namespace {

using Clock = std::chrono::steady_clock;
SparseLinearProfile g_profile;

class ProfileTimer {
 public:
  explicit ProfileTimer(double& slot) : slot_(slot), start_(Clock::now()) {}
  ~ProfileTimer() { slot_ += std::chrono::duration<double>(Clock::now() - start_).count(); }
  ProfileTimer(const ProfileTimer&) = delete;
  ProfileTimer& operator=(const ProfileTimer&) = delete;

 private:
  double& slot_;
  Clock::time_point start_;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

ConstMatrixViewF const_view(const torch::Tensor& t) {
  NMS_DCHECK(t.dim() == 2 && t.scalar_type() == torch::kFloat && t.stride(1) == 1);
  return {t.data_ptr<float>(), t.size(0), t.size(1), t.stride(0)};
}
MatrixViewF mutable_view(const torch::Tensor& t) {
  NMS_DCHECK(t.dim() == 2 && t.scalar_type() == torch::kFloat && t.stride(1) == 1);
  return {t.data_ptr<float>(), t.size(0), t.size(1), t.stride(0)};
}

// uint8 mask buffer <-> BitMask (bit_mask_rows_to_bytes / _from_bytes), rows split over
// LibTorch's threads. (Bit by bit it took ~30 ms for a 4096 x 4096 layer, a tenth of that
// layer's dense step.)
BitMask bits_from_tensor(const torch::Tensor& mask) {
  BitMask bits(mask.size(0), mask.size(1));
  const torch::Tensor c = mask.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  at::parallel_for(0, bits.rows(), 64, [&](int64_t begin, int64_t end) {
    bit_mask_rows_from_bytes(p + begin * bits.cols(), bits.cols(), begin, end, bits);
  });
  return bits;
}

void bits_to_tensor(const BitMask& bits, torch::Tensor& mask) {
  NMS_ASSERT(mask.is_contiguous() && mask.size(0) == bits.rows() && mask.size(1) == bits.cols());
  uint8_t* p = mask.data_ptr<uint8_t>();
  at::parallel_for(0, bits.rows(), 64, [&](int64_t begin, int64_t end) {
    bit_mask_rows_to_bytes(bits, begin, end, p + begin * bits.cols(), bits.cols());
  });
}

// dw += λ (1 − M) ⊙ w in one pass (the tensor expression made four temporaries of the layer's
// size), where nm_wgrad did not fuse it (dense or reference weight gradients).
void add_decay(torch::Tensor& dw, const torch::Tensor& w, const torch::Tensor& mask, float lambda) {
  if (dw.scalar_type() != torch::kFloat || !dw.is_contiguous() || !w.is_contiguous()) {
    dw.add_(w * (1 - mask.to(w.scalar_type())), lambda);
    return;
  }
  float* d = dw.data_ptr<float>();
  const float* x = w.data_ptr<float>();
  const uint8_t* m = mask.data_ptr<uint8_t>();
  at::parallel_for(0, dw.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    // Branch-free (the mask is random: a branch mispredicts half the time and made this pass
    // 11 % of an MLP step at batch 128); vectorises to compare, convert, multiply, add.
    for (int64_t i = begin; i < end; ++i) d[i] += lambda * x[i] * static_cast<float>(m[i] == 0);
  });
}

// What the backward pass of one call needs besides x and W.
struct StepState : torch::CustomClassHolder {
  SparseLinearImpl* layer = nullptr;
  SparseLinearConfig config;
  uint64_t stream = 0;
  int64_t step = 0;
  int64_t mask_step = -1;  // the layer's mask_step after the update
  torch::Tensor mask_fwd;  // uint8 [out, in] (undefined for dense weights)
  torch::Tensor mask_bwd;
  std::shared_ptr<const BitMask> fwd_bits;  // kernel path: M_f
  std::shared_ptr<const BitMask> bwd_bits;  // kernel path, transposable and bimask: M_b
  std::vector<int64_t> perm;                // bimask
};

SharedBits share(BitMask&& bits) {
  return std::make_shared<const BitMask>(std::move(bits));
}

// Step 1 of the file comment: updates the layer's mask buffers when due and records in `state`
// the masks this call uses (the buffers cloned, so that later steps do not change a pending
// backward, or for transposable weights the snapshot kept per held mask, or for Bi-Mask on the
// kernel path a new M_f storage and no M_b bytes; on the kernel path also as bits, computed or
// converted from the buffers).
void update_masks(SparseLinearImpl& layer, bool training, StepState& state) {
  const SparseLinearConfig& config = layer.config();
  if (config.weights == WeightMode::kDense) return;
  const int64_t step = layer.step.item<int64_t>();
  const int64_t mask_step = layer.mask_step.item<int64_t>();
  const bool have_masks = mask_step >= 0;
  const bool recompute = training || !have_masks;  // nm and bimask: M_f of the current W
  const NmPattern pattern = config.pattern;

  torch::NoGradGuard no_grad;
  const bool transposable = config.weights == WeightMode::kTransposable;
  const torch::Tensor w = layer.weight.detach().to(torch::kFloat).contiguous();
  const ConstMatrixViewF wv = const_view(w);
  SharedBits fwd_bits;
  SharedBits bwd_bits;
  torch::Tensor fresh_fwd;  // bimask, kernel path: this call's M_f, already the buffer's storage
  {
    ProfileTimer timer(g_profile.mask_update);
    switch (config.weights) {
      case WeightMode::kDense:
        break;
      case WeightMode::kNm:
        if (recompute) {
          fwd_bits = share(mask_nm_magnitude(wv, pattern));
          bits_to_tensor(*fwd_bits, layer.mask_fwd);
          layer.mask_bwd.copy_(layer.mask_fwd);
          layer.mask_step.fill_(step);
        }
        break;
      case WeightMode::kTransposable:
        if (!have_masks || (training && step - mask_step >= config.refresh_every)) {
          const torch::Tensor scores = w.abs();
          fwd_bits =
              share(mask_transposable(const_view(scores), config.pattern, config.solver).mask);
          bwd_bits = fwd_bits;
          bits_to_tensor(*fwd_bits, layer.mask_fwd);
          layer.mask_bwd.copy_(layer.mask_fwd);
          layer.mask_step.fill_(step);
        }
        break;
      case WeightMode::kBiMask:
        if (!recompute) break;
        if (!have_masks || step - mask_step >= config.bimask_every) {
          BiMaskOptions options;
          options.candidates = config.bimask_candidates;
          options.search = BiMaskSearch::kRandom;
          options.criterion = BiMaskCriterion::kKept;
          options.seed = sparse_linear_step_seed(config.seed ^ layer.stream(), step);
          BiMaskResult result = bimask(wv, pattern, options);
          std::memcpy(layer.perm.data_ptr<int64_t>(), result.perm.data(),
                      result.perm.size() * sizeof(int64_t));
          fwd_bits = share(std::move(result.forward));
          bwd_bits = share(std::move(result.backward));
          layer.mask_step.fill_(step);
        } else {
          const std::vector<int64_t> perm(layer.perm.data_ptr<int64_t>(),
                                          layer.perm.data_ptr<int64_t>() + layer.perm.numel());
          fwd_bits = share(mask_nm_magnitude(wv, pattern));
          bwd_bits = share(bimask_backward(wv, *fwd_bits, pattern, perm));
        }
        if (config.path == ExecPath::kKernels) {
          // M_f goes to a new tensor that becomes the buffer's storage, and this call keeps it
          // without a clone: a later call replaces the storage instead of writing into it (one
          // 16 MB copy less per step for a 4096 x 4096 layer).
          fresh_fwd = torch::empty_like(layer.mask_fwd);
          bits_to_tensor(*fwd_bits, fresh_fwd);
          layer.mask_fwd.set_(fresh_fwd);
        } else {
          bits_to_tensor(*fwd_bits, layer.mask_fwd);
        }
        bits_to_tensor(*bwd_bits, layer.mask_bwd);
        break;
    }
    if (transposable) {
      // The snapshot made at the refresh (fwd_bits set) or the cached one.
      SparseLinearWorkspace& ws = SparseLinearAccess::workspace(layer);
      const bool cached = !fwd_bits && ws.snapshot_step == layer.mask_step.item<int64_t>() &&
                          ws.snapshot_version == layer.mask_fwd._version() &&
                          ws.snapshot_storage == layer.mask_fwd.data_ptr();
      if (!cached) {
        ws.mask_snapshot = layer.mask_fwd.clone();
        ws.mask_bits = config.path == ExecPath::kKernels
                           ? (fwd_bits ? fwd_bits : share(bits_from_tensor(layer.mask_fwd)))
                           : nullptr;
        ws.snapshot_step = layer.mask_step.item<int64_t>();
        ws.snapshot_version = layer.mask_fwd._version();
        ws.snapshot_storage = layer.mask_fwd.data_ptr();
      }
      if (config.path == ExecPath::kKernels) fwd_bits = bwd_bits = ws.mask_bits;
    }
    if (config.path == ExecPath::kKernels) {
      if (!fwd_bits) fwd_bits = share(bits_from_tensor(layer.mask_fwd));
      // Transposable bits come from the snapshot above; Bi-Mask's when it did not recompute.
      if (config.weights == WeightMode::kBiMask && !bwd_bits) {
        bwd_bits = share(bits_from_tensor(layer.mask_bwd));
      }
    }
  }
  state.mask_step = layer.mask_step.item<int64_t>();
  if (transposable) {
    // M_b = M_f for transposable masks (the refresh writes both).
    state.mask_fwd = state.mask_bwd = SparseLinearAccess::workspace(layer).mask_snapshot;
  } else {
    state.mask_fwd = fresh_fwd.defined() ? fresh_fwd : layer.mask_fwd.clone();
    // Bi-Mask's backward on the kernel path reads M_b as bits only (state.bwd_bits).
    const bool bwd_as_bits =
        config.weights == WeightMode::kBiMask && config.path == ExecPath::kKernels;
    if (!bwd_as_bits) state.mask_bwd = layer.mask_bwd.clone();
  }
  state.fwd_bits = std::move(fwd_bits);
  state.bwd_bits = std::move(bwd_bits);
  if (config.weights == WeightMode::kBiMask) {
    state.perm.assign(layer.perm.data_ptr<int64_t>(),
                      layer.perm.data_ptr<int64_t>() + layer.perm.numel());
  }
}

// M ⊙ W; one pass for contiguous fp32 (the tensor expression converts the mask first).
torch::Tensor masked(const torch::Tensor& w, const torch::Tensor& mask) {
  if (w.scalar_type() != torch::kFloat || !w.is_contiguous() || !mask.is_contiguous()) {
    return w * mask.to(w.scalar_type());
  }
  torch::Tensor out = torch::empty_like(w);
  float* o = out.data_ptr<float>();
  const float* x = w.data_ptr<float>();
  const uint8_t* m = mask.data_ptr<uint8_t>();
  at::parallel_for(0, w.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = x[i] * static_cast<float>(m[i] != 0);
  });
  return out;
}

// Y = X Aᵀ (+ bias, added by nm_gemm as it writes Y) on the kernel path for a packed A.
torch::Tensor kernel_gemm(const torch::Tensor& x, const NmGemmOperand& operand, double& gemm_slot,
                          const torch::Tensor& bias = {}) {
  ProfileTimer timer(gemm_slot);
  torch::Tensor y = torch::empty({x.size(0), operand.rows}, x.options());
  nm_gemm(const_view(x), operand, mutable_view(y),
          bias.defined() ? bias.data_ptr<float>() : nullptr);
  return y;
}

// t rounded to bf16 (round to nearest even) and back to float: what nm_gemm_bf16 multiplies, as
// the reference path sees it.
torch::Tensor rounded_to_bf16(const torch::Tensor& t) {
  return t.to(torch::kBFloat16).to(t.scalar_type());
}

// Y = X Aᵀ (+ bias) on nm_gemm_bf16 for a packed A: X fp32, rounded to bf16 as the kernel loads
// it (round to nearest even, as LibTorch's conversion on the reference path).
torch::Tensor kernel_gemm_bf16(const torch::Tensor& x, const NmGemmBf16Operand& operand,
                               double& gemm_slot, const torch::Tensor& bias = {}) {
  ProfileTimer timer(gemm_slot);
  torch::Tensor y = torch::empty({x.size(0), operand.rows}, x.options());
  nm_gemm_bf16(const_view(x), operand, mutable_view(y),
               bias.defined() ? bias.data_ptr<float>() : nullptr);
  return y;
}

class SparseLinearFunction : public torch::autograd::Function<SparseLinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w, const torch::Tensor& b,
                               c10::intrusive_ptr<StepState> state) {
    const SparseLinearConfig& config = state->config;
    torch::Tensor y;
    const bool bf16 = config.inputs == GemmInputs::kBf16 && config.weights != WeightMode::kDense;
    if (config.weights == WeightMode::kDense || config.path == ExecPath::kReference) {
      torch::Tensor wf = w;
      torch::Tensor xf = x;
      if (config.weights != WeightMode::kDense) {
        ProfileTimer timer(g_profile.operand_prep);
        wf = masked(w, state->mask_fwd);
        if (bf16) {
          wf = rounded_to_bf16(wf);
          xf = rounded_to_bf16(x);
        }
      }
      ProfileTimer timer(g_profile.forward_gemm);
      y = b.defined() ? torch::addmm(b, xf, wf.t()) : xf.mm(wf.t());
    } else {
      SparseLinearWorkspace& ws = SparseLinearAccess::workspace(*state->layer);
      const bool fuse_bias =
          b.defined() && b.scalar_type() == torch::kFloat && b.is_contiguous() && b.dim() == 1;
      const torch::Tensor fused_bias = fuse_bias ? b : torch::Tensor();
      if (bf16) {
        {
          ProfileTimer timer(g_profile.operand_prep);
          nm_gemm_bf16_pack_masked_into(const_view(w), *state->fwd_bits, config.pattern,
                                        ws.forward_operand_bf16);
        }
        y = kernel_gemm_bf16(x, ws.forward_operand_bf16, g_profile.forward_gemm, fused_bias);
      } else {
        {
          ProfileTimer timer(g_profile.operand_prep);
          nm_gemm_pack_masked_into(const_view(w), *state->fwd_bits, config.pattern,
                                   ws.forward_operand);
        }
        y = kernel_gemm(x, ws.forward_operand, g_profile.forward_gemm, fused_bias);
      }
      if (b.defined() && !fuse_bias) y.add_(b);
    }
    ctx->save_for_backward({x, w});
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const auto state = ctx->saved_data["state"].toCapsule();
    const StepState& st = *static_cast<const StepState*>(state.get());
    const SparseLinearConfig& config = st.config;
    const torch::Tensor dy = grad_outputs[0].contiguous();

    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = backward_data(dy, w, st);
    torch::Tensor dw;
    if (ctx->needs_input_grad(1)) {
      const bool decay = config.weights != WeightMode::kDense && config.decay > 0.0f;
      bool decay_fused = false;
      dw = weight_grad(dy, x, st, decay ? &w : nullptr, &decay_fused);
      if (decay && !decay_fused) {
        ProfileTimer timer(g_profile.operand_prep);
        add_decay(dw, w, st.mask_fwd, config.decay);
      }
    }
    torch::Tensor db;
    if (ctx->needs_input_grad(2)) db = dy.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }

 private:
  static torch::Tensor backward_data(const torch::Tensor& dy, const torch::Tensor& w,
                                     const StepState& st) {
    const SparseLinearConfig& config = st.config;
    const bool sparse_kernel =
        config.path == ExecPath::kKernels &&
        (config.weights == WeightMode::kTransposable || config.weights == WeightMode::kBiMask);
    // bf16 inputs where backward-data is a sparse GEMM (nm weights run it dense, in fp32).
    const bool bf16 =
        config.inputs == GemmInputs::kBf16 &&
        (config.weights == WeightMode::kTransposable || config.weights == WeightMode::kBiMask);
    if (!sparse_kernel) {
      torch::Tensor wb = w;
      torch::Tensor dyb = dy;
      if (config.weights != WeightMode::kDense) {
        ProfileTimer timer(g_profile.operand_prep);
        wb = masked(w, st.mask_bwd);
        if (bf16) {
          wb = rounded_to_bf16(wb);
          dyb = rounded_to_bf16(dy);
        }
      }
      ProfileTimer timer(g_profile.backward_data_gemm);
      return dyb.mm(wb);
    }
    // A = (P (M_b ⊙ W))ᵀ, P the row permutation (bimask) or the identity, packed from W through
    // register-transposed blocks with the transposed mask (nm_gemm.h); dX = (dY Pᵀ) Aᵀ, the
    // columns of dY in perm order.
    SparseLinearWorkspace& ws = SparseLinearAccess::workspace(*st.layer);
    NMS_ASSERT(st.bwd_bits != nullptr);
    const bool bimask = config.weights == WeightMode::kBiMask;
    const std::span<const int64_t> order =
        bimask ? std::span<const int64_t>(st.perm) : std::span<const int64_t>();
    torch::Tensor dy_in = dy;
    {
      ProfileTimer timer(g_profile.operand_prep);
      // The held transposable mask changes only at a refresh (or a load): transpose it then.
      const int64_t version = static_cast<int64_t>(st.layer->mask_bwd._version());
      const bool cached = !bimask && ws.mask_t_step == st.mask_step && ws.mask_t_version == version;
      if (!cached) {
        ws.mask_t = transpose_mask(*st.bwd_bits, order);
        ws.mask_t_step = bimask ? -2 : st.mask_step;
        ws.mask_t_version = version;
      }
      if (bf16) {
        nm_gemm_bf16_pack_masked_transposed_into(const_view(w), order, ws.mask_t, config.pattern,
                                                 ws.backward_operand_bf16);
      } else {
        nm_gemm_pack_masked_transposed_into(const_view(w), order, ws.mask_t, config.pattern,
                                            ws.backward_operand);
      }
      if (bimask) {  // dY Pᵀ (LibTorch's index_select along dim 1 took 5x as long)
        dy_in = torch::empty({dy.size(0), static_cast<int64_t>(st.perm.size())}, dy.options());
        gather_columns_into(const_view(dy), st.perm, mutable_view(dy_in));
      }
    }
    if (bf16)
      return kernel_gemm_bf16(dy_in, ws.backward_operand_bf16, g_profile.backward_data_gemm);
    return kernel_gemm(dy_in, ws.backward_operand, g_profile.backward_data_gemm);
  }

  // With decay_w set, the SR-STE decay λ (1 − M) ⊙ W is added by the kernel when it can
  // (nm_wgrad's fused start term: *decay_fused = true); otherwise the caller adds it.
  static torch::Tensor weight_grad(const torch::Tensor& dy, const torch::Tensor& x,
                                   const StepState& st, const torch::Tensor* decay_w,
                                   bool* decay_fused) {
    const SparseLinearConfig& config = st.config;
    if (config.grads == GradMode::kDense) {
      ProfileTimer timer(g_profile.weight_grad_gemm);
      return dy.t().mm(x);
    }
    NMS_CHECK(dy.scalar_type() == torch::kFloat, "grads ", grad_mode_name(config.grads),
              " needs float32 gradients, not ", dy.scalar_type());
    const int64_t tokens = dy.size(0);
    const int64_t pruned_tokens = tokens - tokens % config.grad_pattern.m;
    const GradPruneOptions options = sparse_linear_grad_options(config, st.stream, st.step);

    torch::Tensor dw;
    const torch::Tensor dy_head = dy.narrow(0, 0, pruned_tokens);
    const torch::Tensor x_head = x.narrow(0, 0, pruned_tokens);
    if (pruned_tokens == 0) {
      ProfileTimer timer(g_profile.weight_grad_gemm);
      dw = dy.t().mm(x);
      return dw;
    }
    // bf16 inputs: the pruned dY and X rounded to bf16 (nm_wgrad_bf16 on the kernel path).
    const bool bf16 = config.inputs == GemmInputs::kBf16;
    if (config.path == ExecPath::kReference) {
      torch::Tensor pruned = torch::empty_like(dy_head);
      {
        ProfileTimer timer(g_profile.operand_prep);
        grad_prune_into(const_view(dy_head), options, mutable_view(pruned));
      }
      ProfileTimer timer(g_profile.weight_grad_gemm);
      dw = bf16 ? rounded_to_bf16(pruned).t().mm(rounded_to_bf16(x_head)) : pruned.t().mm(x_head);
    } else {
      SparseLinearWorkspace& ws = SparseLinearAccess::workspace(*st.layer);
      // The pruning of dY is timed with the GEMM: nm_wgrad_pruned fuses it into the operand's
      // packing where it can (nm_wgrad.h).
      ProfileTimer timer(g_profile.weight_grad_gemm);
      dw = torch::empty({dy.size(1), x.size(1)}, x.options());
      const torch::Tensor xc = x_head.is_contiguous() ? x_head : x_head.contiguous();
      NmWgradDecay decay;
      const bool fuse = decay_w != nullptr && decay_w->scalar_type() == torch::kFloat &&
                        decay_w->is_contiguous() && st.mask_fwd.is_contiguous() &&
                        st.mask_fwd.scalar_type() == torch::kUInt8;
      if (fuse) {
        decay = {const_view(*decay_w), st.mask_fwd.data_ptr<uint8_t>(), decay_w->size(1),
                 config.decay};
      }
      if (bf16) {
        nm_wgrad_bf16_pruned(const_view(dy_head), options, const_view(xc), mutable_view(dw),
                             &ws.wgrad_bf16, fuse ? &decay : nullptr);
      } else {
        nm_wgrad_pruned(const_view(dy_head), options, const_view(xc), mutable_view(dw), &ws.wgrad,
                        fuse ? &decay : nullptr);
      }
      *decay_fused = fuse;
    }
    if (pruned_tokens < tokens) {
      ProfileTimer timer(g_profile.weight_grad_gemm);
      const int64_t tail = tokens - pruned_tokens;
      dw.addmm_(dy.narrow(0, pruned_tokens, tail).t(), x.narrow(0, pruned_tokens, tail));
    }
    return dw;
  }
};

}  // namespace

uint64_t sparse_linear_step_seed(uint64_t seed, int64_t step) {
  return splitmix64(seed ^ splitmix64(static_cast<uint64_t>(step)));
}

GradPruneOptions sparse_linear_grad_options(const SparseLinearConfig& config, uint64_t stream,
                                            int64_t step) {
  NMS_CHECK(config.grads != GradMode::kDense, "grads dense prunes nothing");
  GradPruneOptions options;
  options.method = config.grads == GradMode::kMvue           ? GradMethod::kMvue
                   : config.grads == GradMode::kMvueApprox24 ? GradMethod::kMvueApprox24
                                                             : GradMethod::kTopN;
  options.pattern = config.grad_pattern;
  options.axis = NmAxis::kCols;
  options.seed = sparse_linear_step_seed(config.seed, step);
  options.stream = stream;
  return options;
}

torch::Tensor sparse_linear_apply(SparseLinearImpl& layer, const torch::Tensor& x) {
  const SparseLinearConfig& config = layer.config();
  const int64_t in = layer.options().in_features;
  const bool training = layer.is_training() && torch::GradMode::is_enabled();
  NMS_CHECK(x.scalar_type() == layer.weight.scalar_type(), "input dtype (", x.scalar_type(),
            ") differs from the weight's (", layer.weight.scalar_type(), ")");
  const bool float32 = x.scalar_type() == torch::kFloat;
  NMS_CHECK(float32 || config.path == ExecPath::kReference || config.weights == WeightMode::kDense,
            "path kernels runs float32 only (input is ", x.scalar_type(),
            "); use path reference for other dtypes");
  NMS_CHECK(x.device().is_cpu(), "nmsparse_torch runs on the CPU (input on ", x.device(), ")");

  // Module::to(dtype) converts every buffer; the masks and counters keep their integer types.
  for (auto [buffer, dtype] : {std::pair{&layer.mask_fwd, torch::kUInt8},
                               {&layer.mask_bwd, torch::kUInt8},
                               {&layer.perm, torch::kInt64},
                               {&layer.step, torch::kInt64},
                               {&layer.mask_step, torch::kInt64}}) {
    if (buffer->scalar_type() != dtype) buffer->set_data(buffer->to(dtype));
  }
  auto state = c10::make_intrusive<StepState>();
  state->layer = &layer;
  state->config = config;
  state->stream = layer.stream();
  state->step = layer.step.item<int64_t>();
  update_masks(layer, training, *state);

  const torch::Tensor x2d = x.reshape({-1, in}).contiguous();
  torch::Tensor y = SparseLinearFunction::apply(x2d, layer.weight, layer.bias, std::move(state));
  if (training) {
    torch::NoGradGuard no_grad;
    layer.step.add_(1);
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = layer.options().out_features;
  return y.reshape(shape);
}

SparseLinearProfile sparse_linear_profile() {
  return g_profile;
}
void sparse_linear_profile_reset() {
  g_profile = {};
}

}  // namespace nms
