// multi_head_attention (attention.h): the per-head path against the LibTorch formulation (forward
// and the qkv gradient, causal and not, heads under and over OpenBLAS's single-thread size, 1 and
// 2 threads), both against a loop-by-loop computation in double, and bad shapes.
#include "nmsparse/torch/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/expect_error.h"

namespace nms {
namespace {

struct Case {
  int64_t b, t, width, heads;
};

// out and d(Σ out ⊙ g)/d qkv of both paths on the same input.
struct Result {
  torch::Tensor out, grad;
};

Result run(bool reference, const torch::Tensor& qkv0, const torch::Tensor& g, int64_t heads,
           bool causal) {
  torch::Tensor qkv = qkv0.clone().requires_grad_(true);
  torch::Tensor out = reference ? multi_head_attention_reference(qkv, heads, causal)
                                : multi_head_attention(qkv, heads, causal);
  out.backward(g);
  return {out.detach(), qkv.grad()};
}

double max_abs(const torch::Tensor& t) {
  return t.abs().max().item<double>();
}

TEST(Attention, MatchesTheLibTorchFormulationOnAnyThreadCount) {
  // T·T·D: 50·50·64 runs heads on our threads, 70·70·64 > 262144 one by one on OpenBLAS's.
  const std::vector<Case> cases{
      {3, 50, 192, 3}, {2, 70, 128, 2}, {2, 1, 8, 2}, {4, 17, 12, 3}, {1, 9, 6, 1}};
  const int saved_threads = torch::get_num_threads();
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {
      torch::manual_seed(c.t * 7 + c.width);
      const torch::Tensor qkv = torch::randn({c.b, c.t, 3 * c.width});
      const torch::Tensor g = torch::randn({c.b, c.t, c.width});
      Result first;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message()
                     << "B " << c.b << " T " << c.t << " W " << c.width << " H " << c.heads
                     << " causal " << causal << " threads " << threads);
        torch::set_num_threads(threads);
        const Result want = run(true, qkv, g, c.heads, causal);
        const Result got = run(false, qkv, g, c.heads, causal);
        ASSERT_EQ(got.out.sizes(), want.out.sizes());
        // The same sgemm calls on the same operands: equal where 1/√D is a power of two, and
        // within a rounding of dS's scale otherwise (D = 6 here; attention.h).
        EXPECT_LE(max_abs(got.out - want.out), 1e-6 * max_abs(want.out));
        EXPECT_LE(max_abs(got.grad - want.grad), 1e-6 * max_abs(want.grad));
        if (threads == 1) {
          first = got;
        } else {  // the same bits on two threads
          EXPECT_TRUE(torch::equal(got.out, first.out));
          EXPECT_TRUE(torch::equal(got.grad, first.grad));
        }
      }
    }
  }
  torch::set_num_threads(saved_threads);
}

// softmax(q kᵀ / √D + mask) v and its qkv gradient, loop by loop in double.
Result naive(const torch::Tensor& qkv_f, const torch::Tensor& g_f, int64_t heads, bool causal) {
  const torch::Tensor qkv = qkv_f.to(torch::kDouble);
  const torch::Tensor g = g_f.to(torch::kDouble);
  const int64_t b_len = qkv.size(0), t_len = qkv.size(1), width = qkv.size(2) / 3;
  const int64_t d_len = width / heads;
  auto a = qkv.accessor<double, 3>();
  auto ga = g.accessor<double, 3>();
  torch::Tensor out = torch::zeros({b_len, t_len, width}, torch::kDouble);
  torch::Tensor grad = torch::zeros_like(qkv);
  auto oa = out.accessor<double, 3>();
  auto da = grad.accessor<double, 3>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_len));
  for (int64_t b = 0; b < b_len; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t q0 = h * d_len, k0 = width + h * d_len, v0 = 2 * width + h * d_len;
      std::vector<double> p(static_cast<size_t>(t_len * t_len), 0.0);
      for (int64_t i = 0; i < t_len; ++i) {
        const int64_t last = causal ? i : t_len - 1;
        double top = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          double s = 0.0;
          for (int64_t e = 0; e < d_len; ++e) s += a[b][i][q0 + e] * a[b][j][k0 + e];
          p[i * t_len + j] = s * scale;
          top = std::max(top, s * scale);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= last; ++j)
          sum += p[i * t_len + j] = std::exp(p[i * t_len + j] - top);
        for (int64_t j = 0; j <= last; ++j) p[i * t_len + j] /= sum;
        for (int64_t e = 0; e < d_len; ++e) {
          double o = 0.0;
          for (int64_t j = 0; j <= last; ++j) o += p[i * t_len + j] * a[b][j][v0 + e];
          oa[b][i][q0 + e] = o;
        }
      }
      // dP = g vᵀ, dv = Pᵀ g, dS = P ⊙ (dP − rowsum(P ⊙ dP)) · scale, dq = dS k, dk = dSᵀ q.
      for (int64_t i = 0; i < t_len; ++i) {
        std::vector<double> dp(static_cast<size_t>(t_len), 0.0);
        double dot = 0.0;
        for (int64_t j = 0; j < t_len; ++j) {
          for (int64_t e = 0; e < d_len; ++e) dp[j] += ga[b][i][q0 + e] * a[b][j][v0 + e];
          dot += p[i * t_len + j] * dp[j];
        }
        for (int64_t j = 0; j < t_len; ++j) {
          const double ds = p[i * t_len + j] * (dp[j] - dot) * scale;
          for (int64_t e = 0; e < d_len; ++e) {
            da[b][j][v0 + e] += p[i * t_len + j] * ga[b][i][q0 + e];
            da[b][i][q0 + e] += ds * a[b][j][k0 + e];
            da[b][j][k0 + e] += ds * a[b][i][q0 + e];
          }
        }
      }
    }
  }
  return {out, grad};
}

TEST(Attention, BothPathsMatchTheDefinitionInDouble) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    torch::manual_seed(5);
    const torch::Tensor qkv = torch::randn({2, 11, 3 * 12});
    const torch::Tensor g = torch::randn({2, 11, 12});
    const Result want = naive(qkv, g, 3, causal);
    for (bool reference : {false, true}) {
      const Result got = run(reference, qkv, g, 3, causal);
      // fp32 sums of at most 11 terms of magnitude <= ~10 and a softmax: 1e-5 of the largest.
      EXPECT_LE(max_abs(got.out.to(torch::kDouble) - want.out), 1e-5 * max_abs(want.out));
      EXPECT_LE(max_abs(got.grad.to(torch::kDouble) - want.grad), 1e-5 * max_abs(want.grad));
    }
  }
}

TEST(Attention, OtherDtypesAndLayoutsRunTheFormulation) {
  torch::manual_seed(6);
  const torch::Tensor qkv = torch::randn({2, 5, 3 * 8}, torch::kDouble);
  EXPECT_TRUE(torch::allclose(multi_head_attention(qkv, 2, true),
                              multi_head_attention_reference(qkv, 2, true)));
  // A non-contiguous view: the same values as its contiguous copy.
  const torch::Tensor wide = torch::randn({2, 5, 3 * 8 + 4});
  const torch::Tensor view = wide.narrow(2, 0, 3 * 8);
  EXPECT_TRUE(torch::allclose(multi_head_attention(view, 2, false),
                              multi_head_attention(view.contiguous(), 2, false)));
}

TEST(Attention, BadShapesAreErrors) {
  using nms::testing::expect_error;
  expect_error(
      [] {
        multi_head_attention(torch::zeros({4, 24}), 2, false);
      },
      "qkv must be [B, T, 3·W] with W divisible by heads (2), got [4, 24]");
  expect_error([] { multi_head_attention(torch::zeros({1, 4, 30}), 4, false); }, "got [1, 4, 30]");
  expect_error(
      [] {
        multi_head_attention(torch::zeros({1, 4, 24}), 0, false);
      },
      "heads must be >= 1, got 0");
}

}  // namespace
}  // namespace nms
