// The column-major descriptions the cuSPARSELt and cuBLASLt paths hand to the libraries
// (src/cuda/gemm_layout.h), checked on the host: a naive column-major GEMM that reads the
// row-major buffers exactly as described must give Y = X Wᵀ, dX = dY W and dWᵀ = Xᵀ dY, and
// op(A)'s groups along K must be the 2:4 operand's grouped axis.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/gemm_layout.h"
#include "testing/random.h"

namespace nms {
namespace {

using cuda::GemmShape;
using cuda::TrainingGemm;

// Element (i, j) of op(M) for a column-major matrix stored with leading dimension ld.
float op_at(const float* data, const cuda::detail::ColMajor& c, bool transpose, int64_t i,
            int64_t j) {
  const int64_t r = transpose ? j : i;
  const int64_t k = transpose ? i : j;
  EXPECT_LT(r, c.rows);
  EXPECT_LT(k, c.cols);
  return data[k * c.ld + r];
}

TEST(CudaGemmLayout, ColumnMajorProductsAreTheTrainingGemms) {
  const GemmShape s{5, 3, 4};  // T, in, out: all different
  const Matrix x = testing::random_matrix(s.tokens, s.in, 1);
  const Matrix w = testing::random_matrix(s.out, s.in, 2);
  const Matrix dy = testing::random_matrix(s.tokens, s.out, 3);
  struct Case {
    TrainingGemm gemm;
    const Matrix* a;  // the 2:4 operand, row-major
    const Matrix* b;
    int64_t result_rows, result_cols;  // row-major result
  };
  for (const Case& c : {Case{TrainingGemm::kForward, &w, &x, s.tokens, s.out},
                        Case{TrainingGemm::kBackwardData, &w, &dy, s.tokens, s.in},
                        Case{TrainingGemm::kWeightGrad, &dy, &x, s.in, s.out}}) {
    const cuda::detail::GemmLayout l = cuda::detail::gemm_layout(c.gemm, s);
    // The buffers hold exactly the stored matrices.
    EXPECT_EQ(l.a.rows * l.a.cols, c.a->size());
    EXPECT_EQ(l.b.rows * l.b.cols, c.b->size());
    EXPECT_EQ(l.d.rows * l.d.cols, c.result_rows * c.result_cols);
    EXPECT_EQ(l.d.ld, c.result_cols);
    std::vector<float> d(static_cast<size_t>(l.d.ld * l.d.cols));
    for (int64_t i = 0; i < l.m; ++i) {
      for (int64_t j = 0; j < l.n; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < l.k; ++k) {
          acc += static_cast<double>(op_at(c.a->data(), l.a, l.transpose_a, i, k)) *
                 op_at(c.b->data(), l.b, l.transpose_b, k, j);
        }
        d[static_cast<size_t>(j * l.d.ld + i)] = static_cast<float>(acc);
      }
    }
    // Row-major result (r, q) lives at d[r * result_cols + q].
    for (int64_t r = 0; r < c.result_rows; ++r) {
      for (int64_t q = 0; q < c.result_cols; ++q) {
        double expect = 0.0;
        if (c.gemm == TrainingGemm::kForward) {  // Y(t, o) = sum_i X(t, i) W(o, i)
          for (int64_t i = 0; i < s.in; ++i) expect += double{x(r, i)} * w(q, i);
        } else if (c.gemm == TrainingGemm::kBackwardData) {  // dX(t, i) = sum_o dY(t, o) W(o, i)
          for (int64_t o = 0; o < s.out; ++o) expect += double{dy(r, o)} * w(o, q);
        } else {  // dW^T(i, o) = sum_t X(t, i) dY(t, o)
          for (int64_t t = 0; t < s.tokens; ++t) expect += double{x(t, r)} * dy(t, q);
        }
        EXPECT_NEAR(d[static_cast<size_t>(r * c.result_cols + q)], expect, 1e-5)
            << cuda::training_gemm_name(c.gemm) << " (" << r << ", " << q << ")";
      }
    }
  }
}

// op(A)(i, k) for consecutive k is: forward W(i, k) (along in), backward-data W(k, i) (along
// out), weight-grad dY(k, i) (along T): the axis each operand is pruned along.
TEST(CudaGemmLayout, TheReductionRunsAlongThePrunedAxis) {
  const GemmShape s{8, 12, 16};
  const cuda::detail::GemmLayout f = cuda::detail::gemm_layout(TrainingGemm::kForward, s);
  const cuda::detail::GemmLayout b = cuda::detail::gemm_layout(TrainingGemm::kBackwardData, s);
  const cuda::detail::GemmLayout g = cuda::detail::gemm_layout(TrainingGemm::kWeightGrad, s);
  EXPECT_EQ(f.k, s.in);
  EXPECT_EQ(b.k, s.out);
  EXPECT_EQ(g.k, s.tokens);
  // Storage offset of op(A)(0, k): row-major W [out, in] holds W(o, i) at o * in + i.
  const auto offset = [](const cuda::detail::GemmLayout& l, int64_t i, int64_t k) {
    const int64_t r = l.transpose_a ? k : i;
    const int64_t c = l.transpose_a ? i : k;
    return c * l.a.ld + r;
  };
  EXPECT_EQ(offset(f, 2, 5), 2 * s.in + 5);   // W(2, 5): k walks along in
  EXPECT_EQ(offset(b, 2, 5), 5 * s.in + 2);   // W(5, 2): k walks along out
  EXPECT_EQ(offset(g, 2, 5), 5 * s.out + 2);  // dY(5, 2): k walks along tokens
}

}  // namespace
}  // namespace nms
