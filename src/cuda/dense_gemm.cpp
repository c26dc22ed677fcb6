// The dense baseline of the 2:4 GEMMs: the same column-major products (cuda/gemm_layout.h)
// through cuBLASLt in bf16 with fp32 accumulation, with the heuristic's first algorithm and a
// 32 MiB workspace (what cuBLASLt's own samples use for large GEMMs).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda/cuda_support.h"
#include "cuda/gemm_layout.h"
#include "nmsparse/cuda/sparse_gemm.h"

#define NMS_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                \
    const cublasStatus_t nms_cublas_status_ = (expr);                                 \
    NMS_CHECK(nms_cublas_status_ == CUBLAS_STATUS_SUCCESS, #expr, ": cuBLAS status ", \
              static_cast<int>(nms_cublas_status_), " (",                             \
              cublasLtGetStatusString(nms_cublas_status_), ")");                      \
  } while (0)

namespace nms::cuda {

struct DenseGemm::Impl {
  detail::GemmLayout layout{};
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
  detail::DeviceBuffer<unsigned char> workspace;

  ~Impl() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
    if (handle != nullptr) cublasLtDestroy(handle);
  }
};

DenseGemm::DenseGemm(TrainingGemm gemm, GemmShape shape) : impl_(std::make_unique<Impl>()) {
  detail::require_device("DenseGemm");
  Impl& s = *impl_;
  s.layout = detail::gemm_layout(gemm, shape);
  const detail::GemmLayout& l = s.layout;
  NMS_CUBLAS_CHECK(cublasLtCreate(&s.handle));
  NMS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = l.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = l.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  NMS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  NMS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  NMS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&s.a, CUDA_R_16BF, static_cast<uint64_t>(l.a.rows),
                                              static_cast<uint64_t>(l.a.cols), l.a.ld));
  NMS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&s.b, CUDA_R_16BF, static_cast<uint64_t>(l.b.rows),
                                              static_cast<uint64_t>(l.b.cols), l.b.ld));
  NMS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&s.d, CUDA_R_16BF, static_cast<uint64_t>(l.d.rows),
                                              static_cast<uint64_t>(l.d.cols), l.d.ld));
  constexpr size_t kWorkspace = size_t{32} << 20;
  s.workspace = detail::DeviceBuffer<unsigned char>(kWorkspace);
  cublasLtMatmulPreference_t pref = nullptr;
  NMS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t bytes = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                       sizeof(bytes));
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(s.handle, s.op, s.a, s.b, s.d, s.d, pref, 1, &s.algo, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  NMS_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for the ",
            training_gemm_name(gemm), " GEMM at T ", shape.tokens, " in ", shape.in, " out ",
            shape.out, " (status ", static_cast<int>(status), ")");
}

DenseGemm::~DenseGemm() = default;

void DenseGemm::run(const void* sparse_operand_bf16, const void* dense_bf16, void* result_bf16) {
  Impl& s = *impl_;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  NMS_CUBLAS_CHECK(cublasLtMatmul(s.handle, s.op, &alpha, sparse_operand_bf16, s.a, dense_bf16, s.b,
                                  &beta, result_bf16, s.d, result_bf16, s.d, &s.algo.algo,
                                  s.workspace.get(), s.workspace.size(), nullptr));
}

}  // namespace nms::cuda
