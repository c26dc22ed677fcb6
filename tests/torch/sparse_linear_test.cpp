// SparseLinear: the reference path against the maths written out by hand (double), the kernel
// path against the reference path (fp32, same random draws), the masks of each mode, the refresh
// schedule, MVUE's unbiasedness through the layer, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/verify.h"
#include "nmsparse/torch/sparse_linear.h"
#include "testing/expect_error.h"
#include "torch/sparse_linear_internal.h"

namespace nms {
namespace {

SparseLinearConfig make_config(WeightMode weights, GradMode grads, NmPattern pattern,
                               ExecPath path) {
  SparseLinearConfig c;
  c.weights = weights;
  c.grads = grads;
  c.pattern = pattern;
  c.grad_pattern = grads == GradMode::kMvueApprox24 ? NmPattern{2, 4} : pattern;
  c.path = path;
  c.seed = 7;
  c.bimask_candidates = 5;
  return c;
}

BitMask to_bits(const torch::Tensor& mask) {
  const torch::Tensor c = mask.contiguous();
  BitMask bits(c.size(0), c.size(1));
  for (int64_t i = 0; i < c.size(0); ++i) {
    for (int64_t j = 0; j < c.size(1); ++j) {
      if (c[i][j].item<uint8_t>() != 0) bits.set(i, j);
    }
  }
  return bits;
}

struct Grads {
  torch::Tensor y, dx, dw, db;
};

// One training step's forward and backward with upstream gradient r: loss = Σ y ⊙ r.
Grads step(SparseLinear& layer, const torch::Tensor& x_in, const torch::Tensor& r) {
  torch::Tensor x = x_in.clone().requires_grad_(true);
  layer->weight.mutable_grad() = torch::Tensor();
  if (layer->bias.defined()) layer->bias.mutable_grad() = torch::Tensor();
  torch::Tensor y = layer->forward(x);
  (y * r).sum().backward();
  return {y.detach(), x.grad(), layer->weight.grad(),
          layer->bias.defined() ? layer->bias.grad() : torch::Tensor()};
}

constexpr std::array<WeightMode, 4> kWeightModes{WeightMode::kDense, WeightMode::kNm,
                                                 WeightMode::kTransposable, WeightMode::kBiMask};

TEST(SparseLinear, DenseConfigIsTorchLinear) {
  torch::manual_seed(1);
  SparseLinear layer(12, 5);
  torch::nn::Linear linear(12, 5);
  torch::manual_seed(1);
  linear->reset_parameters();
  torch::manual_seed(1);
  layer->reset_parameters();
  EXPECT_TRUE(torch::equal(layer->weight, linear->weight));
  EXPECT_TRUE(torch::equal(layer->bias, linear->bias));
  const torch::Tensor x = torch::randn({3, 4, 12});
  EXPECT_TRUE(torch::allclose(layer->forward(x), linear->forward(x)));
  EXPECT_EQ(layer->forward(x).sizes(), (std::vector<int64_t>{3, 4, 5}));
}

// The reference path in double against Y = X (M_f ⊙ W)ᵀ + b, dX = dY (M_b ⊙ W),
// dW = dYᵀ X + λ (1 − M_f) ⊙ W, db = Σ dY, written here with the masks the layer used; and for
// the modes whose dX is the exact gradient (M_b = M_f), dX against central differences (Y is
// linear in X, so the difference quotient is exact up to rounding: tolerance 1e-9).
TEST(SparseLinear, ReferencePathMatchesTheMathsInDouble) {
  for (WeightMode mode : kWeightModes) {
    SCOPED_TRACE(std::string(weight_mode_name(mode)));
    torch::manual_seed(2);
    SparseLinear layer(SparseLinearOptions(16, 8));
    layer->to(torch::kDouble);
    layer->configure(make_config(mode, GradMode::kDense, {2, 4}, ExecPath::kReference));
    const torch::Tensor x = torch::randn({6, 16}, torch::kDouble);
    const torch::Tensor r = torch::randn({6, 8}, torch::kDouble);
    const Grads g = step(layer, x, r);

    const torch::Tensor w = layer->weight.detach();
    const torch::Tensor mf =
        mode == WeightMode::kDense ? torch::ones_like(w) : layer->mask_fwd.to(torch::kDouble);
    const torch::Tensor mb =
        mode == WeightMode::kDense ? torch::ones_like(w) : layer->mask_bwd.to(torch::kDouble);
    const double lambda = mode == WeightMode::kDense ? 0.0 : layer->config().decay;
    EXPECT_TRUE(torch::allclose(g.y, x.mm((mf * w).t()) + layer->bias.detach(), 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(g.dx, r.mm(mb * w), 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(g.dw, r.t().mm(x) + lambda * (1 - mf) * w, 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(g.db, r.sum(0), 1e-12, 1e-12));
    if (mode == WeightMode::kBiMask) {
      // Bi-Mask's dX is an approximation unless M_b keeps all of M_f.
      EXPECT_TRUE(torch::all(mb <= mf).item<bool>());
      continue;
    }
    torch::NoGradGuard no_grad;
    layer->eval();  // the held masks, no step
    const double h = 1e-3;
    for (int64_t t = 0; t < x.size(0); t += 5) {
      for (int64_t j = 0; j < x.size(1); j += 3) {
        torch::Tensor xp = x.clone(), xm = x.clone();
        xp[t][j] += h;
        xm[t][j] -= h;
        const double fd = ((layer->forward(xp) * r).sum().item<double>() -
                           (layer->forward(xm) * r).sum().item<double>()) /
                          (2 * h);
        EXPECT_NEAR(fd, g.dx[t][j].item<double>(), 1e-9) << "x[" << t << "][" << j << "]";
      }
    }
    layer->train();
  }
}

// Kernel path vs reference path, fp32, identical weights, inputs and random draws. Both sum the
// same products in different orders; for a dot product of K terms each result is within
// γ_K Σ|terms| (γ_K = K u / (1 − K u), u = 2^-24) of the exact value, so the two paths differ by at
// most 2 γ_K (|A| |B|) elementwise. The test allows 2.5 γ_K (|A| |B|) + 1e-30.
void expect_close_by_dot_bound(const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& abs_product, int64_t k, const char* what) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = k * u / (1 - k * u);
  const torch::Tensor bound = 2.5 * gamma * abs_product + 1e-30;
  const torch::Tensor excess = ((a - b).abs() - bound).max();
  EXPECT_LE(excess.item<double>(), 0.0)
      << what << ": max |diff| " << (a - b).abs().max().item<double>();
}

TEST(SparseLinear, KernelPathMatchesReferencePath) {
  struct Shape {
    int64_t tokens, in, out;
    NmPattern pattern;
  };
  const std::vector<Shape> shapes{{37, 24, 16, {2, 4}},  {64, 64, 32, {2, 4}}, {9, 32, 8, {1, 4}},
                                  {48, 16, 24, {4, 8}},  {3, 8, 8, {2, 4}},    {33, 32, 16, {1, 2}},
                                  {70, 32, 32, {8, 16}}, {1, 4, 4, {2, 4}}};
  const std::array<GradMode, 4> grad_modes{GradMode::kDense, GradMode::kMvue,
                                           GradMode::kMvueApprox24, GradMode::kTopN};
  for (const Shape& s : shapes) {
    for (WeightMode wm : kWeightModes) {
      for (GradMode gm : grad_modes) {
        if (gm == GradMode::kMvueApprox24 && s.pattern != NmPattern{2, 4}) continue;
        SCOPED_TRACE(::testing::Message()
                     << s.tokens << "x" << s.in << "->" << s.out << " " << s.pattern.to_string()
                     << " " << weight_mode_name(wm) << "/" << grad_mode_name(gm));
        torch::manual_seed(3);
        SparseLinear ref(s.in, s.out);
        SparseLinear ker(s.in, s.out);
        {
          torch::NoGradGuard no_grad;
          ker->weight.copy_(ref->weight);
          ker->bias.copy_(ref->bias);
        }
        ref->configure(make_config(wm, gm, s.pattern, ExecPath::kReference));
        ker->configure(make_config(wm, gm, s.pattern, ExecPath::kKernels));
        ref->set_stream(11);
        ker->set_stream(11);
        for (int it = 0; it < 2; ++it) {  // the second step reuses the workspace
          const torch::Tensor x = torch::randn({s.tokens, s.in});
          const torch::Tensor r = torch::randn({s.tokens, s.out});
          const Grads a = step(ref, x, r);
          const Grads b = step(ker, x, r);
          ASSERT_TRUE(torch::equal(ref->mask_fwd, ker->mask_fwd));
          ASSERT_TRUE(torch::equal(ref->mask_bwd, ker->mask_bwd));
          const torch::Tensor w = ref->weight.detach();
          const torch::Tensor wf = w * ref->mask_fwd.to(torch::kFloat);
          const torch::Tensor wb = w * ref->mask_bwd.to(torch::kFloat);
          expect_close_by_dot_bound(a.y, b.y, x.abs().mm(wf.abs().t()) + ref->bias.abs(), s.in + 1,
                                    "y");
          expect_close_by_dot_bound(a.dx, b.dx, r.abs().mm(wb.abs()), s.out, "dx");
          // dW from the pruned dY both paths draw (recomputed here from the layer's options).
          torch::Tensor dy_used = r.clone();
          const int64_t head = s.tokens - s.tokens % ref->config().grad_pattern.m;
          if (gm != GradMode::kDense && head > 0) {
            const GradPruneOptions o = sparse_linear_grad_options(ref->config(), ref->stream(),
                                                                  ref->step.item<int64_t>() - 1);
            torch::Tensor part = dy_used.narrow(0, 0, head).contiguous();
            Matrix pruned = grad_prune(ConstMatrixViewF(part.data_ptr<float>(), head, s.out), o);
            dy_used.narrow(0, 0, head).copy_(torch::from_blob(pruned.data(), {head, s.out}));
          }
          const torch::Tensor decay =
              ref->config().decay * (1 - ref->mask_fwd.to(torch::kFloat)) * w;
          expect_close_by_dot_bound(a.dw, dy_used.t().mm(x) + decay,
                                    dy_used.abs().t().mm(x.abs()) + decay.abs(), s.tokens + 1,
                                    "dw ref");
          expect_close_by_dot_bound(a.dw, b.dw, dy_used.abs().t().mm(x.abs()) + decay.abs(),
                                    s.tokens + 1, "dw");
          EXPECT_TRUE(torch::allclose(a.db, b.db, 1e-5, 1e-5));
          {
            torch::NoGradGuard no_grad;  // a few SGD steps so the masks move
            ref->weight.sub_(0.5 * a.dw);
            ker->weight.copy_(ref->weight);
          }
        }
      }
    }
  }
}

// bf16 inputs: both paths multiply the same bf16-rounded X, dY and masked weights (products exact
// in fp32) and sum them in different orders, so expect_close_by_dot_bound's bound holds again,
// with the rounded operands in Σ|terms|. The weight gradient stays fp32 on both paths.
TEST(SparseLinear, Bf16InputsKernelPathMatchesReferencePath) {
  if (!nm_gemm_bf16_kernel_active()) GTEST_SKIP() << "no AVX512_BF16 kernel on this CPU";
  struct Shape {
    int64_t tokens, in, out;
    NmPattern pattern;
  };
  const std::vector<Shape> shapes{
      {37, 64, 32, {2, 4}}, {9, 32, 40, {1, 4}}, {48, 96, 64, {16, 32}}, {3, 8, 8, {2, 4}}};
  for (const Shape& s : shapes) {
    for (WeightMode wm : {WeightMode::kNm, WeightMode::kTransposable, WeightMode::kBiMask}) {
      SCOPED_TRACE(::testing::Message() << s.tokens << "x" << s.in << "->" << s.out << " "
                                        << s.pattern.to_string() << " " << weight_mode_name(wm));
      torch::manual_seed(5);
      SparseLinear ref(s.in, s.out);
      SparseLinear ker(s.in, s.out);
      SparseLinear fp32(s.in, s.out);
      {
        torch::NoGradGuard no_grad;
        for (SparseLinear* l : {&ker, &fp32}) {
          (*l)->weight.copy_(ref->weight);
          (*l)->bias.copy_(ref->bias);
        }
      }
      SparseLinearConfig config = make_config(wm, GradMode::kMvue, s.pattern, ExecPath::kReference);
      config.inputs = GemmInputs::kBf16;
      ref->configure(config);
      config.path = ExecPath::kKernels;
      ker->configure(config);
      config.inputs = GemmInputs::kFp32;
      fp32->configure(config);
      for (SparseLinear* l : {&ref, &ker, &fp32}) (*l)->set_stream(11);
      for (int it = 0; it < 2; ++it) {
        const torch::Tensor x = torch::randn({s.tokens, s.in});
        const torch::Tensor r = torch::randn({s.tokens, s.out});
        const Grads a = step(ref, x, r);
        const Grads b = step(ker, x, r);
        const Grads c = step(fp32, x, r);
        ASSERT_TRUE(torch::equal(ref->mask_fwd, ker->mask_fwd));
        ASSERT_TRUE(torch::equal(ref->mask_bwd, ker->mask_bwd));
        const auto round = [](const torch::Tensor& t) {
          return t.to(torch::kBFloat16).to(torch::kFloat);
        };
        const torch::Tensor w = ref->weight.detach();
        const torch::Tensor wf = round(w * ref->mask_fwd.to(torch::kFloat));
        expect_close_by_dot_bound(a.y, b.y, round(x).abs().mm(wf.abs().t()) + ref->bias.abs(),
                                  s.in + 1, "y");
        if (wm != WeightMode::kNm) {  // nm runs backward-data dense, in fp32
          const torch::Tensor wb = round(w * ref->mask_bwd.to(torch::kFloat));
          expect_close_by_dot_bound(a.dx, b.dx, round(r).abs().mm(wb.abs()), s.out, "dx");
        }
        // dW: both paths multiply the same rounded operands (pruned dY, X); they differ only in
        // the order of the fp32 additions and where the decay term is added (~1e-6 relative).
        EXPECT_TRUE(torch::allclose(a.dw, b.dw, 1e-4, 1e-4));
        // The rounding happened: fp32 inputs give another Y and, where T holds a group of
        // tokens (else dW runs dense), another dW (2^-9 relative per input).
        const bool dw_sparse = s.tokens >= s.pattern.m;
        for (const auto& [bf, fp] : {std::pair{b.y, c.y}, std::pair{b.dw, c.dw}}) {
          if (bf.data_ptr() == b.dw.data_ptr() && !dw_sparse) continue;
          EXPECT_GT((bf - fp).abs().max().item<double>(), 0.0);
          EXPECT_LT((bf - fp).abs().max().item<double>(), 0.05 * fp.abs().max().item<double>());
        }
        {
          torch::NoGradGuard no_grad;
          ref->weight.sub_(0.5 * a.dw);
          ker->weight.copy_(ref->weight);
          fp32->weight.copy_(ref->weight);
        }
      }
    }
  }
}

// With small integer inputs every product and sum is exact in fp32, so the paths agree bitwise.
TEST(SparseLinear, KernelAndReferenceAreBitwiseEqualOnExactArithmetic) {
  torch::manual_seed(4);
  SparseLinear ref(32, 16);
  SparseLinear ker(32, 16);
  {
    torch::NoGradGuard no_grad;
    ref->weight.copy_(torch::randint(-4, 5, {16, 32}).to(torch::kFloat));
    ker->weight.copy_(ref->weight);
    ker->bias.copy_(ref->bias);
  }
  // λ = 2^-12: λ·W and every partial sum are exact, so the kernel path's fused decay (nm_wgrad
  // starts each chain from λ·W) and the reference's separate add round identically (not at all).
  SparseLinearConfig ref_config =
      make_config(WeightMode::kTransposable, GradMode::kTopN, {2, 4}, ExecPath::kReference);
  SparseLinearConfig ker_config =
      make_config(WeightMode::kTransposable, GradMode::kTopN, {2, 4}, ExecPath::kKernels);
  ref_config.decay = ker_config.decay = 1.0f / 4096.0f;
  ref->configure(ref_config);
  ker->configure(ker_config);
  const torch::Tensor x = torch::randint(-3, 4, {40, 32}).to(torch::kFloat);
  const torch::Tensor r = torch::randint(-3, 4, {40, 16}).to(torch::kFloat);
  const Grads a = step(ref, x, r);
  const Grads b = step(ker, x, r);
  EXPECT_TRUE(torch::equal(a.dx, b.dx));
  EXPECT_TRUE(torch::equal(a.dw, b.dw));
  // The decay is in both: without it the weight gradients would differ where the mask drops.
  const torch::Tensor decay =
      ref_config.decay * (1 - ref->mask_fwd.to(torch::kFloat)) * ref->weight.detach();
  EXPECT_GT(decay.abs().max().item<float>(), 0.0f);
}

TEST(SparseLinear, MasksOfEveryModeAreValid) {
  const NmPattern p{2, 4};
  for (WeightMode mode : {WeightMode::kNm, WeightMode::kTransposable, WeightMode::kBiMask}) {
    SCOPED_TRACE(std::string(weight_mode_name(mode)));
    torch::manual_seed(5);
    SparseLinear layer(32, 24);
    layer->configure(make_config(mode, GradMode::kDense, p, ExecPath::kKernels));
    step(layer, torch::randn({8, 32}), torch::randn({8, 24}));
    const BitMask fwd = to_bits(layer->mask_fwd);
    const BitMask bwd = to_bits(layer->mask_bwd);
    const NmVerifyReport f = verify_nm(fwd, p);
    EXPECT_EQ(f.row_violations, 0);
    EXPECT_EQ(f.row_groups_full, f.row_groups);  // exactly n per group: nothing wasted
    if (mode == WeightMode::kTransposable) {
      EXPECT_EQ(fwd, bwd);
      EXPECT_EQ(f.col_violations, 0);
    }
    if (mode == WeightMode::kBiMask) {
      std::vector<int64_t> perm(layer->perm.data_ptr<int64_t>(),
                                layer->perm.data_ptr<int64_t>() + layer->perm.numel());
      EXPECT_EQ(verify_nm(permute_rows(bwd, perm), p).col_violations, 0);
      for (int64_t i = 0; i < 24; ++i) {
        for (int64_t j = 0; j < 32; ++j) EXPECT_TRUE(!bwd.get(i, j) || fwd.get(i, j));
      }
      EXPECT_GT(layer->backward_retained(), 0.5);
      EXPECT_LE(layer->backward_retained(), 1.0);
    }
  }
}

// Transposable masks are held between refreshes and re-solved every refresh_every steps; a copy of
// the state (parameters and buffers, as a checkpoint holds them) continues identically.
TEST(SparseLinear, TransposableRefreshScheduleSurvivesAStateCopy) {
  torch::manual_seed(6);
  SparseLinearConfig config =
      make_config(WeightMode::kTransposable, GradMode::kMvue, {2, 4}, ExecPath::kKernels);
  config.refresh_every = 3;
  SparseLinear layer(16, 8);
  layer->configure(config);
  const torch::Tensor x = torch::randn({12, 16});
  const torch::Tensor r = torch::randn({12, 8});
  step(layer, x, r);
  EXPECT_EQ(layer->mask_step.item<int64_t>(), 0);
  const torch::Tensor first = layer->mask_fwd.clone();
  {
    torch::NoGradGuard no_grad;  // make the held mask the worst choice
    layer->weight.mul_(1 - 0.99 * first.to(torch::kFloat));
  }
  step(layer, x, r);
  step(layer, x, r);
  EXPECT_TRUE(torch::equal(layer->mask_fwd, first));
  EXPECT_EQ(layer->mask_step.item<int64_t>(), 0);

  SparseLinear copy(16, 8);
  copy->configure(config);
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : layer->named_parameters())
      copy->named_parameters()[p.key()].copy_(p.value());
    for (const auto& b : layer->named_buffers()) copy->named_buffers()[b.key()].copy_(b.value());
  }
  const Grads a = step(layer, x, r);  // step 3: re-solved
  const Grads b = step(copy, x, r);
  EXPECT_EQ(layer->mask_step.item<int64_t>(), 3);
  EXPECT_FALSE(torch::equal(layer->mask_fwd, first));
  EXPECT_TRUE(torch::equal(layer->mask_fwd, copy->mask_fwd));
  EXPECT_TRUE(torch::equal(a.dw, b.dw));  // same step, same stream: the same MVUE draws
  EXPECT_TRUE(torch::equal(a.dx, b.dx));
}

// Transposable layers keep one snapshot of the held mask (and its bits) from refresh to refresh:
// an in-place edit of the buffer must still reach the next step, on both paths, and a forward's
// pending backward must keep its own mask when a refresh comes in between.
TEST(SparseLinear, HeldTransposableMaskFollowsEditsOfTheBuffer) {
  for (ExecPath path : {ExecPath::kReference, ExecPath::kKernels}) {
    SCOPED_TRACE(path == ExecPath::kKernels ? "kernels" : "reference");
    torch::manual_seed(8);
    SparseLinearConfig config =
        make_config(WeightMode::kTransposable, GradMode::kDense, {2, 4}, path);
    config.refresh_every = 2;
    SparseLinear layer(16, 8);
    layer->configure(config);
    const torch::Tensor x = torch::randn({12, 16});
    const torch::Tensor r = torch::randn({12, 8});
    step(layer, x, r);  // step 0: solved
    {
      torch::NoGradGuard no_grad;
      layer->mask_fwd.zero_();  // keeps nothing: still a valid N:M mask
      layer->mask_bwd.zero_();
    }
    const Grads edited = step(layer, x, r);  // step 1: held, edited
    EXPECT_TRUE(torch::equal(edited.y, layer->bias.detach().expand({12, 8})));
    EXPECT_TRUE(torch::equal(edited.dx, torch::zeros_like(edited.dx)));

    // Step 2 refreshes; a forward of step 2 whose backward runs after step 3's forward.
    torch::Tensor xa = x.clone().requires_grad_(true);
    layer->weight.mutable_grad() = torch::Tensor();
    torch::Tensor ya = layer->forward(xa);
    const torch::Tensor mask2 = layer->mask_fwd.clone();
    {
      torch::NoGradGuard no_grad;
      layer->mask_fwd.zero_();
      layer->mask_bwd.zero_();
    }
    torch::Tensor yb = layer->forward(x);  // step 3: held, edited again
    EXPECT_TRUE(torch::equal(yb.detach(), layer->bias.detach().expand({12, 8})));
    (ya * r).sum().backward();
    const torch::Tensor w = layer->weight.detach();
    const torch::Tensor want = r.mm(w * mask2.to(torch::kFloat));
    EXPECT_TRUE(torch::allclose(xa.grad(), want, 1e-5, 1e-5));
  }
}

// Bi-Mask on the kernel path keeps each call's M_f as a new buffer storage (no clone) and M_b as
// bits only. Two forwards before one backward (gradient accumulation), with a permutation search
// at every step so the second forward changes the backward mask: the kernel path must give the
// reference path's gradients (which clones both masks per call), and the buffers must end equal.
TEST(SparseLinear, BiMaskCallsKeepTheirOwnMasksUntilTheirBackward) {
  torch::manual_seed(9);
  SparseLinear ref(32, 16);
  SparseLinear ker(32, 16);
  {
    torch::NoGradGuard no_grad;
    ker->weight.copy_(ref->weight);
    ker->bias.copy_(ref->bias);
  }
  for (auto [layer, path] : {std::pair{&ref, ExecPath::kReference}, {&ker, ExecPath::kKernels}}) {
    SparseLinearConfig config = make_config(WeightMode::kBiMask, GradMode::kDense, {2, 4}, path);
    config.bimask_every = 1;
    (*layer)->configure(config);
  }
  const torch::Tensor x1 = torch::randn({8, 32});
  const torch::Tensor x2 = torch::randn({8, 32});
  const torch::Tensor r = torch::randn({8, 16});
  std::vector<torch::Tensor> dx, dw, perms;
  for (SparseLinear* layer : {&ref, &ker}) {
    torch::Tensor a = x1.clone().requires_grad_(true);
    torch::Tensor b = x2.clone().requires_grad_(true);
    const torch::Tensor y1 = (*layer)->forward(a);
    perms.push_back((*layer)->perm.clone());
    const torch::Tensor y2 = (*layer)->forward(b);
    ((y1 + y2) * r).sum().backward();
    dx.push_back(a.grad() + b.grad());
    dw.push_back((*layer)->weight.grad());
  }
  EXPECT_TRUE(torch::equal(perms[0], perms[1]));
  EXPECT_FALSE(torch::equal(perms[1], ker->perm));  // the second call searched again
  EXPECT_TRUE(torch::equal(ref->mask_fwd, ker->mask_fwd));
  EXPECT_TRUE(torch::equal(ref->mask_bwd, ker->mask_bwd));
  EXPECT_TRUE(torch::allclose(dx[0], dx[1], 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(dw[0], dw[1], 1e-5, 1e-5));
}

// MVUE through the layer: over K steps (a fresh draw each) the mean weight gradient is the dense
// one. Each element's mean must lie within 5 standard errors (sample SD / sqrt(K)) of the dense
// value; for 64 elements a false alarm has probability < 64 · 5.8e-7 under normality (K = 400 draws
// of a bounded variable: the CLT applies). Elements with zero sample variance must be exact.
TEST(SparseLinear, MvueWeightGradientIsUnbiasedAcrossSteps) {
  torch::manual_seed(8);
  SparseLinear layer(16, 4);
  layer->configure(make_config(WeightMode::kDense, GradMode::kMvue, {2, 4}, ExecPath::kKernels));
  const torch::Tensor x = torch::randn({8, 16});
  const torch::Tensor r = torch::randn({8, 4});
  const torch::Tensor dense = r.t().mm(x);
  const int k = 400;
  torch::Tensor sum = torch::zeros_like(dense, torch::kDouble);
  torch::Tensor sum_sq = torch::zeros_like(dense, torch::kDouble);
  for (int i = 0; i < k; ++i) {
    const torch::Tensor dw = step(layer, x, r).dw.to(torch::kDouble);
    sum += dw;
    sum_sq += dw * dw;
  }
  const torch::Tensor mean = sum / k;
  const torch::Tensor var = (sum_sq / k - mean * mean).clamp_min(0) * k / (k - 1);
  const torch::Tensor se = (var / k).sqrt();
  const torch::Tensor err = (mean - dense.to(torch::kDouble)).abs();
  EXPECT_TRUE(torch::all(err <= 5 * se + 1e-5 * dense.abs().to(torch::kDouble)).item<bool>())
      << "max err/se " << (err / (se + 1e-12)).max().item<double>();
  EXPECT_GT(var.max().item<double>(), 0.0);  // the draws do change from step to step
}

TEST(SparseLinear, BadInputGetsClearErrors) {
  SparseLinear layer(10, 8);
  testing::expect_error(
      [&] {
        layer->configure(
            make_config(WeightMode::kNm, GradMode::kDense, {2, 4}, ExecPath::kKernels));
      },
      "in (10) is not a multiple of m (4)");
  SparseLinear tall(8, 6);
  testing::expect_error(
      [&] {
        tall->configure(
            make_config(WeightMode::kTransposable, GradMode::kDense, {2, 4}, ExecPath::kKernels));
      },
      "out (6) is not a multiple of m (4)");
  SparseLinearConfig bad =
      make_config(WeightMode::kNm, GradMode::kMvueApprox24, {2, 4}, ExecPath::kKernels);
  bad.grad_pattern = {4, 8};
  testing::expect_error([&] { bad.validate(); },
                        "mvue-approx24 needs the gradient pattern 2:4, not 4:8");
  SparseLinear ok(8, 8);
  ok->configure(make_config(WeightMode::kNm, GradMode::kMvue, {2, 4}, ExecPath::kKernels));
  testing::expect_error([&] { ok->forward(torch::randn({2, 7})); }, "input's last dimension (7)");
  ok->to(torch::kDouble);
  testing::expect_error(
      [&] {
        ok->forward(torch::randn({2, 8}, torch::kDouble));
      },
      "path kernels runs float32 only");
  SparseLinearConfig bf16 =
      make_config(WeightMode::kTransposable, GradMode::kMvue, {3, 6}, ExecPath::kReference);
  bf16.inputs = GemmInputs::kBf16;
  testing::expect_error([&] { bf16.validate(); },
                        "bf16 inputs need a pattern whose m divides 32, not 3:6");
  bf16.weights = WeightMode::kDense;  // the weight gradient alone is sparse
  testing::expect_error([&] { bf16.validate(); },
                        "bf16 inputs need a gradient pattern whose m divides 32, not 3:6");
  EXPECT_EQ(gemm_inputs_from_name("bf16"), GemmInputs::kBf16);
  EXPECT_FALSE(gemm_inputs_from_name("fp16").has_value());
  EXPECT_EQ(weight_mode_from_name("bimask"), WeightMode::kBiMask);
  EXPECT_EQ(grad_mode_from_name("mvue-approx24"), GradMode::kMvueApprox24);
  EXPECT_FALSE(weight_mode_from_name("sparse").has_value());
}

}  // namespace
}  // namespace nms
