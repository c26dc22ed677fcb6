// multi_head_attention (attention.h): the per-head OpenBLAS path as an autograd function, and the
// LibTorch formulation it replaces.
#include "nmsparse/torch/attention.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "nmsparse/core/error.h"

#if defined(NMS_HAVE_OPENBLAS)
#include <cblas.h>
#endif

namespace nms {
namespace {

struct Shape {
  int64_t b, t, width, heads, d;
};

Shape checked_shape(const torch::Tensor& qkv, int64_t heads) {
  std::ostringstream sizes;
  sizes << qkv.sizes();
  NMS_CHECK(heads >= 1, "attention: heads must be >= 1, got ", heads);
  NMS_CHECK(qkv.dim() == 3 && qkv.size(2) % (3 * heads) == 0,
            "attention: qkv must be [B, T, 3·W] with W divisible by heads (", heads, "), got ",
            sizes.str());
  const int64_t width = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), width, heads, width / heads};
}

#if defined(NMS_HAVE_OPENBLAS)
// OpenBLAS runs an sgemm of m·n·k <= 65536 · GEMM_MULTITHREAD_THRESHOLD (4 by default) on
// the calling thread and larger ones on its pool. Heads whose GEMMs stay under that run in
// parallel on our threads; larger heads run one after the other, each GEMM on OpenBLAS's pool
// (from inside our threads its pool would only contend). OpenBLAS's thread count is global state
// that LibTorch's dense GEMMs share, so the call leaves it alone.
constexpr int64_t kBlasSingleThreadWork = 65536 * 4;

// body(bh, batch, head) for every head of every batch entry, on LibTorch's thread count.
template <class Body>
void for_heads(const Shape& s, Body&& body) {
  const int64_t n = s.b * s.heads;
  const bool heads_in_parallel = s.t * s.t * s.d <= kBlasSingleThreadWork && n > 1;
#pragma omp parallel for schedule(static) \
    num_threads(torch::get_num_threads()) if (heads_in_parallel)
  for (int64_t bh = 0; bh < n; ++bh) body(bh, bh / s.heads, bh % s.heads);
}

// C = alpha · op(A) op(B), row-major, C m x n, inner dimension k.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f,
              c, static_cast<int>(ldc));
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv,
                               int64_t heads, bool causal) {
    const Shape s = checked_shape(qkv, heads);
    const int64_t ld = 3 * s.width;  // row stride of q, k and v inside qkv
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
    torch::Tensor scores = torch::empty({s.b * s.heads, s.t, s.t}, qkv.options());
    torch::Tensor out = torch::empty({s.b, s.t, s.width}, qkv.options());
    const float* x = qkv.data_ptr<float>();
    float* sc = scores.data_ptr<float>();
    for_heads(s, [&](int64_t bh, int64_t b, int64_t h) {
      const float* q = x + b * s.t * ld + h * s.d;
      float* sbh = sc + bh * s.t * s.t;
      gemm(false, true, s.t, s.t, s.d, scale, q, ld, q + s.width, ld, sbh, s.t);
      if (causal) {
        for (int64_t i = 0; i < s.t; ++i) {
          for (int64_t j = i + 1; j < s.t; ++j) sbh[i * s.t + j] = -INFINITY;
        }
      }
    });
    const torch::Tensor probs = torch::softmax(scores, -1);
    const float* p = probs.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for_heads(s, [&](int64_t bh, int64_t b, int64_t h) {
      const float* v = x + b * s.t * ld + 2 * s.width + h * s.d;
      gemm(false, false, s.t, s.d, s.t, 1.0f, p + bh * s.t * s.t, s.t, v, ld,
           o + b * s.t * s.width + h * s.d, s.width);
    });
    ctx->save_for_backward({qkv, probs});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& qkv = saved[0];
    const torch::Tensor& probs = saved[1];
    const Shape s = checked_shape(qkv, ctx->saved_data["heads"].toInt());
    const torch::Tensor dout = grad_outputs[0].contiguous();
    const int64_t ld = 3 * s.width;
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
    torch::Tensor dqkv = torch::empty_like(qkv);
    torch::Tensor dprobs = torch::empty_like(probs);
    const float* x = qkv.data_ptr<float>();
    const float* p = probs.data_ptr<float>();
    const float* g = dout.data_ptr<float>();
    float* dx = dqkv.data_ptr<float>();
    float* dp = dprobs.data_ptr<float>();
    for_heads(s, [&](int64_t bh, int64_t b, int64_t h) {
      const float* v = x + b * s.t * ld + 2 * s.width + h * s.d;
      const float* gbh = g + b * s.t * s.width + h * s.d;
      gemm(false, true, s.t, s.t, s.d, 1.0f, gbh, s.width, v, ld, dp + bh * s.t * s.t, s.t);
      gemm(true, false, s.t, s.d, s.t, 1.0f, p + bh * s.t * s.t, s.t, gbh, s.width,
           dx + b * s.t * ld + 2 * s.width + h * s.d, ld);
    });
    const torch::Tensor dscores = torch::_softmax_backward_data(dprobs, probs, -1, torch::kFloat);
    const float* ds = dscores.data_ptr<float>();
    for_heads(s, [&](int64_t bh, int64_t b, int64_t h) {
      const float* q = x + b * s.t * ld + h * s.d;
      const float* dsbh = ds + bh * s.t * s.t;
      float* dq = dx + b * s.t * ld + h * s.d;
      gemm(false, false, s.t, s.d, s.t, scale, dsbh, s.t, q + s.width, ld, dq, ld);
      gemm(true, false, s.t, s.d, s.t, scale, dsbh, s.t, q, ld, dq + s.width, ld);
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};
#endif

}  // namespace

torch::Tensor multi_head_attention_reference(const torch::Tensor& qkv, int64_t heads, bool causal) {
  const Shape s = checked_shape(qkv, heads);
  // [B, T, 3, H, D] -> 3 × [B, H, T, D] -> [B·H, T, D]. unbind, not three selects: its backward
  // is one stack, where each select's would zero-fill the whole qkv gradient.
  const auto parts = qkv.reshape({s.b, s.t, 3, s.heads, s.d}).permute({2, 0, 3, 1, 4}).unbind(0);
  const auto q = parts[0].reshape({s.b * s.heads, s.t, s.d});
  const auto k = parts[1].reshape({s.b * s.heads, s.t, s.d});
  const auto v = parts[2].reshape({s.b * s.heads, s.t, s.d});
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  torch::Tensor scores;  // [B·H, T, T]
  if (causal) {
    // The mask as an additive bias fused into the GEMM (masked_fill would copy the scores).
    const auto bias =
        torch::full({s.t, s.t}, -std::numeric_limits<float>::infinity(), qkv.options()).triu(1);
    scores = torch::baddbmm(bias, q, k.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
  } else {
    scores = torch::bmm(q, k.transpose(1, 2)).mul_(scale);
  }
  const auto attn = torch::softmax(scores, -1);
  // [B·H, T, D] -> [B, H, T, D] -> [B, T, H, D] -> [B, T, W].
  return torch::bmm(attn, v)
      .view({s.b, s.heads, s.t, s.d})
      .transpose(1, 2)
      .reshape({s.b, s.t, s.width});
}

torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads, bool causal) {
  checked_shape(qkv, heads);
#if defined(NMS_HAVE_OPENBLAS)
  const int64_t int_max = std::numeric_limits<int>::max();  // BLAS dimensions and strides
  if (qkv.scalar_type() == torch::kFloat && qkv.device().is_cpu() && qkv.is_contiguous() &&
      qkv.numel() > 0 && qkv.size(1) <= int_max && qkv.size(2) <= int_max) {
    return AttentionFunction::apply(qkv, heads, causal);
  }
#endif
  return multi_head_attention_reference(qkv, heads, causal);
}

}  // namespace nms
