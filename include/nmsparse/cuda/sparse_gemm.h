// The three training GEMMs of an N:M linear layer at 2:4 in bf16 (fp32 accumulation) on sparse
// tensor cores through cuSPARSELt, and the same GEMMs dense through cuBLASLt as the baseline.
// Part of nmsparse_cuda; the sparse GEMMs exist when cuSPARSELt was found at configure time
// (scripts/install-deps.sh --cuda installs it from PyPI, nvidia-cusparselt-cu13).
//
// Shapes (row-major, like the CPU library; W is [out, in], X [T, in], dY [T, out]):
//   forward        Y  [T, in -> out] = X  · Wᵀ   sparse operand W, 2:4 along in
//   backward_data  dX [T, out -> in] = dY · W    sparse operand W, 2:4 along out (transposable)
//   weight_grad    dWᵀ [in, out]     = Xᵀ · dY   sparse operand dY, 2:4 along T (MVUE output);
//                  the result is dW transposed (row-major [in, out]), the layout in which the
//                  2:4 operand can sit on the left of cuSPARSELt's product.
// In cuSPARSELt's column-major terms every product is D = op(A) · op(B) with the 2:4 operand as
// A and its groups along K: forward "TN", backward-data "NN", weight-grad "NT".
//
// All pointers are device pointers to bf16 (2 bytes per element, dense row-major, no padding).
// A plan is made once per (GEMM, shape) and run many times; set_sparse_operand compresses a new
// 2:4 operand (a weight after an update, a pruned gradient) into cuSPARSELt's layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "nmsparse/format/compressed_nm.h"

namespace nms::cuda {

enum class TrainingGemm { kForward, kBackwardData, kWeightGrad };
std::string_view training_gemm_name(TrainingGemm gemm);  // "forward", "backward_data", ...

struct GemmShape {
  int64_t tokens = 0;
  int64_t in = 0;
  int64_t out = 0;
};

// True when the 2:4 GEMMs were built (cuSPARSELt found) and a device is present.
bool sparse_gemm_available(std::string* why = nullptr);

// Element counts of the operands of `gemm`: the 2:4 one, the dense one and the result.
struct GemmOperands {
  int64_t sparse_rows, sparse_cols;  // row-major shape of the 2:4 operand as stored
  int64_t dense_rows, dense_cols;
  int64_t result_rows, result_cols;
};
GemmOperands gemm_operands(TrainingGemm gemm, GemmShape shape);

class Sparse24Gemm {
 public:
  // Plans the product; with search = true cuSPARSELt times its kernels once (MatmulSearch) on
  // scratch data and keeps the fastest. Throws nms::Error naming the shape when cuSPARSELt
  // refuses it (every dimension must be a multiple of 16 for bf16).
  Sparse24Gemm(TrainingGemm gemm, GemmShape shape, bool search = true);
  ~Sparse24Gemm();
  Sparse24Gemm(const Sparse24Gemm&) = delete;
  Sparse24Gemm& operator=(const Sparse24Gemm&) = delete;

  // Compresses a dense bf16 2:4 operand (zeros where pruned; device memory).
  void set_sparse_operand(const void* dense_bf16);
  // The same from our compressed format (2:4 values + indices, host memory, the operand's own
  // axis: kRows for forward, kCols for backward-data and weight-grad), via a dense bf16 copy.
  void set_sparse_operand(const CompressedNm& operand);
  // result = the GEMM with the last operand set (device memory; asynchronous on the default
  // stream).
  void run(const void* dense_bf16, void* result_bf16);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The dense baseline: the same product through cuBLASLt, the 2:4 operand given dense.
class DenseGemm {
 public:
  DenseGemm(TrainingGemm gemm, GemmShape shape);
  ~DenseGemm();
  DenseGemm(const DenseGemm&) = delete;
  DenseGemm& operator=(const DenseGemm&) = delete;
  void run(const void* sparse_operand_bf16, const void* dense_bf16, void* result_bf16);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nms::cuda
