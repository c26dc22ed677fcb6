// PRIVATE header of the CUDA backend: the column-major description of the three training GEMMs
// (nmsparse/cuda/sparse_gemm.h) shared by the cuSPARSELt and cuBLASLt paths, so both compute the
// same product from the same buffers.
//
// A row-major [r, c] buffer is a column-major (c x r) matrix with ld = c. With D = op(A) op(B)
// in column-major terms (D is Md x Nd, K the reduction) and A the 2:4 operand:
//   forward        D = Y^T  (out x T)  A = W as (in x out), op T   B = X as (in x T), op N
//   backward_data  D = dX^T (in x T)   A = W as (in x out), op N   B = dY as (out x T), op N
//   weight_grad    D = dW   (out x in) A = dY as (out x T), op N   B = X as (in x T), op T
// (D of weight_grad, column-major (out x in), is dW^T row-major [in, out].) In each case op(A)
// is Md x K with its 2:4 groups along K: in, out and T respectively.
#pragma once

#include <cstdint>

#include "nmsparse/core/error.h"
#include "nmsparse/cuda/sparse_gemm.h"

namespace nms::cuda::detail {

struct ColMajor {
  int64_t rows, cols, ld;
};

struct GemmLayout {
  ColMajor a, b, d;
  bool transpose_a, transpose_b;
  int64_t m, n, k;  // D is m x n, K the reduction
};

inline GemmLayout gemm_layout(TrainingGemm gemm, GemmShape s) {
  NMS_CHECK(s.tokens > 0 && s.in > 0 && s.out > 0, "shape T ", s.tokens, " in ", s.in, " out ",
            s.out, " must be positive");
  switch (gemm) {
    case TrainingGemm::kForward:
      return {{s.in, s.out, s.in},
              {s.in, s.tokens, s.in},
              {s.out, s.tokens, s.out},
              true,
              false,
              s.out,
              s.tokens,
              s.in};
    case TrainingGemm::kBackwardData:
      return {{s.in, s.out, s.in},
              {s.out, s.tokens, s.out},
              {s.in, s.tokens, s.in},
              false,
              false,
              s.in,
              s.tokens,
              s.out};
    case TrainingGemm::kWeightGrad:
      return {{s.out, s.tokens, s.out},
              {s.in, s.tokens, s.in},
              {s.out, s.in, s.out},
              false,
              true,
              s.out,
              s.in,
              s.tokens};
  }
  NMS_THROW("unknown TrainingGemm ", static_cast<int>(gemm));
}

}  // namespace nms::cuda::detail
