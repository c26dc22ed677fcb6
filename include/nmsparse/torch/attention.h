// Multi-head self-attention's core for the transformer models (models.h), from the packed
// projection to the heads' concatenated outputs:
//
//   qkv [B, T, 3·W] = (q | k | v), each W = H·D features, head h the D features from h·D;
//   out [B, T, W],  out[b, :, h·D : (h+1)·D] = softmax(q_bh k_bhᵀ / √D + mask) v_bh,
//   mask = −∞ above the diagonal when `causal`, 0 otherwise.
//
// For contiguous float32 CPU tensors (with OpenBLAS in the build) the B·H heads run as separate
// OpenBLAS sgemm calls on strided views of qkv, parallel over heads, and the softmax and its
// backward as LibTorch ops on the [B·H, T, T] scores: no copies of q, k, v or of the output into
// per-head layouts, and none of LibTorch 1.13's per-matrix dispatch in bmm (three selects and an
// mm per matrix). Backward: dP = dO vᵀ, dv = Pᵀ dO, dS = softmax_backward(dP, P) / √D, dq = dS k,
// dk = dSᵀ q, written into one [B, T, 3·W] gradient.
//
// The GEMMs are the ones LibTorch's bmm formulation makes, matrix for matrix, with 1/√D applied
// as sgemm's alpha: the results equal it where 1/√D is a power of two (D = 4, 16, 64, 256; the
// models' default heads have 64) and differ by rounding otherwise (the backward scales dS · k
// after the sum, LibTorch dS before it; attention_test). Heads whose GEMMs OpenBLAS keeps on the
// calling thread (m·n·k <= 65536 · 4) run in parallel on ours, larger ones one after another on
// OpenBLAS's pool, which splits a GEMM's output and not its sums: the results do not depend on the
// thread count.
//
// Vision transformer, B 128, T 50, W 192, H 3, forward + backward of one block's attention (one
// run, Zen 4): 29.4 -> 15.4 ms on one thread, 22.3 -> 7.8 ms on two.
//
// Other dtypes, devices or layouts run the LibTorch formulation (bmm, softmax, bmm). Memory: the
// [B·H, T, T] probabilities are kept for the backward, as LibTorch's softmax keeps them.
//
// Errors (nms::Error): qkv not [B, T, 3·W] with W divisible by heads, heads < 1.
#pragma once

#include <torch/torch.h>

namespace nms {

torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads, bool causal);

// The LibTorch formulation (permute, bmm, softmax, bmm): what the fast path equals, and the
// fallback.
torch::Tensor multi_head_attention_reference(const torch::Tensor& qkv, int64_t heads, bool causal);

}  // namespace nms
