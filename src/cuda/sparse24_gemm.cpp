// 2:4 bf16 GEMMs on sparse tensor cores through cuSPARSELt (the column-major products of
// cuda/gemm_layout.h, the 2:4 operand as A). Without cuSPARSELt at configure time
// (NMS_HAVE_CUSPARSELT undefined) every entry point says how to get it.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/cuda_support.h"
#include "cuda/gemm_layout.h"
#include "nmsparse/core/half.h"
#include "nmsparse/cuda/cuda.h"
#include "nmsparse/cuda/sparse_gemm.h"

#if defined(NMS_HAVE_CUSPARSELT)
#include <cusparseLt.h>

#define NMS_CUSPARSELT_CHECK(expr)                                    \
  do {                                                                \
    const cusparseStatus_t nms_lt_status_ = (expr);                   \
    NMS_CHECK(nms_lt_status_ == CUSPARSE_STATUS_SUCCESS, #expr, ": ", \
              cusparseLtGetErrorName(nms_lt_status_), " (",           \
              cusparseLtGetErrorString(nms_lt_status_), ")");         \
  } while (0)
#endif

namespace nms::cuda {

#if defined(NMS_HAVE_CUSPARSELT)

bool sparse_gemm_available(std::string* why) {
  return device_available(why);
}

struct Sparse24Gemm::Impl {
  TrainingGemm gemm{};
  GemmShape shape{};
  detail::GemmLayout layout{};
  cusparseLtHandle_t handle{};
  cusparseLtMatDescriptor_t a{}, b{}, d{};
  cusparseLtMatmulDescriptor_t matmul{};
  cusparseLtMatmulAlgSelection_t selection{};
  cusparseLtMatmulPlan_t plan{};
  bool have_handle = false, have_descriptors = false, have_selection = false, have_plan = false;
  detail::DeviceBuffer<unsigned char> compressed, compress_scratch, workspace;
  bool operand_set = false;

  ~Impl() {
    if (have_plan) cusparseLtMatmulPlanDestroy(&plan);
    if (have_selection) cusparseLtMatmulAlgSelectionDestroy(&selection);
    if (have_descriptors) {
      cusparseLtMatDescriptorDestroy(&a);
      cusparseLtMatDescriptorDestroy(&b);
      cusparseLtMatDescriptorDestroy(&d);
    }
    if (have_handle) cusparseLtDestroy(&handle);
  }

  void resize_workspace() {
    size_t bytes = 0;
    NMS_CUSPARSELT_CHECK(cusparseLtMatmulGetWorkspace(&handle, &plan, &bytes));
    if (bytes > workspace.size()) workspace = detail::DeviceBuffer<unsigned char>(bytes);
  }
};

Sparse24Gemm::Sparse24Gemm(TrainingGemm gemm, GemmShape shape, bool search)
    : impl_(std::make_unique<Impl>()) {
  detail::require_device("Sparse24Gemm");
  Impl& s = *impl_;
  s.gemm = gemm;
  s.shape = shape;
  s.layout = detail::gemm_layout(gemm, shape);
  const detail::GemmLayout& l = s.layout;
  NMS_CHECK(l.m % 16 == 0 && l.n % 16 == 0 && l.k % 16 == 0, "the 2:4 ", training_gemm_name(gemm),
            " GEMM needs T, in and out multiples of 16 (bf16 sparse "
            "tensor cores); got T ",
            shape.tokens, " in ", shape.in, " out ", shape.out);
  NMS_CUSPARSELT_CHECK(cusparseLtInit(&s.handle));
  s.have_handle = true;
  constexpr uint32_t kAlignment = 16;
  NMS_CUSPARSELT_CHECK(cusparseLtStructuredDescriptorInit(
      &s.handle, &s.a, l.a.rows, l.a.cols, l.a.ld, kAlignment, CUDA_R_16BF, CUSPARSE_ORDER_COL,
      CUSPARSELT_SPARSITY_50_PERCENT));
  NMS_CUSPARSELT_CHECK(cusparseLtDenseDescriptorInit(&s.handle, &s.b, l.b.rows, l.b.cols, l.b.ld,
                                                     kAlignment, CUDA_R_16BF, CUSPARSE_ORDER_COL));
  NMS_CUSPARSELT_CHECK(cusparseLtDenseDescriptorInit(&s.handle, &s.d, l.d.rows, l.d.cols, l.d.ld,
                                                     kAlignment, CUDA_R_16BF, CUSPARSE_ORDER_COL));
  s.have_descriptors = true;
  NMS_CUSPARSELT_CHECK(cusparseLtMatmulDescriptorInit(
      &s.handle, &s.matmul,
      l.transpose_a ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE,
      l.transpose_b ? CUSPARSE_OPERATION_TRANSPOSE : CUSPARSE_OPERATION_NON_TRANSPOSE, &s.a, &s.b,
      &s.d, &s.d, CUSPARSE_COMPUTE_32F));
  NMS_CUSPARSELT_CHECK(cusparseLtMatmulAlgSelectionInit(&s.handle, &s.selection, &s.matmul,
                                                        CUSPARSELT_MATMUL_ALG_DEFAULT));
  s.have_selection = true;
  NMS_CUSPARSELT_CHECK(cusparseLtMatmulPlanInit(&s.handle, &s.plan, &s.matmul, &s.selection));
  s.have_plan = true;
  size_t compressed_bytes = 0;
  size_t scratch_bytes = 0;
  NMS_CUSPARSELT_CHECK(
      cusparseLtSpMMACompressedSize(&s.handle, &s.plan, &compressed_bytes, &scratch_bytes));
  s.compressed = detail::DeviceBuffer<unsigned char>(compressed_bytes);
  s.compress_scratch = detail::DeviceBuffer<unsigned char>(scratch_bytes);
  s.resize_workspace();
  if (search) {
    // MatmulSearch times every kernel configuration on these operands (zeros are a valid 2:4
    // operand) and keeps the fastest in the plan.
    const GemmOperands ops = gemm_operands(gemm, shape);
    detail::DeviceBuffer<uint16_t> a(static_cast<size_t>(ops.sparse_rows * ops.sparse_cols));
    detail::DeviceBuffer<uint16_t> b(static_cast<size_t>(ops.dense_rows * ops.dense_cols));
    detail::DeviceBuffer<uint16_t> d(static_cast<size_t>(ops.result_rows * ops.result_cols));
    a.zero();
    b.zero();
    set_sparse_operand(a.get());
    const float alpha = 1.0f;
    const float beta = 0.0f;
    NMS_CUSPARSELT_CHECK(cusparseLtMatmulSearch(&s.handle, &s.plan, &alpha, s.compressed.get(),
                                                b.get(), &beta, d.get(), d.get(), s.workspace.get(),
                                                nullptr, 0));
    s.resize_workspace();
    s.operand_set = false;
  }
}

Sparse24Gemm::~Sparse24Gemm() = default;

void Sparse24Gemm::set_sparse_operand(const void* dense_bf16) {
  Impl& s = *impl_;
  NMS_CUSPARSELT_CHECK(cusparseLtSpMMACompress(&s.handle, &s.plan, dense_bf16, s.compressed.get(),
                                               s.compress_scratch.get(), nullptr));
  s.operand_set = true;
}

void Sparse24Gemm::set_sparse_operand(const CompressedNm& operand) {
  Impl& s = *impl_;
  const GemmOperands ops = gemm_operands(s.gemm, s.shape);
  const NmAxis axis = s.gemm == TrainingGemm::kForward ? NmAxis::kRows : NmAxis::kCols;
  NMS_CHECK(operand.pattern == (NmPattern{2, 4}), "the sparse tensor cores take 2:4, not ",
            operand.pattern.to_string());
  NMS_CHECK(
      operand.rows == ops.sparse_rows && operand.cols == ops.sparse_cols && operand.axis == axis,
      "the ", training_gemm_name(s.gemm), " GEMM's 2:4 operand is ", ops.sparse_rows, " x ",
      ops.sparse_cols, " grouped along ", axis == NmAxis::kRows ? "rows" : "columns", "; got ",
      operand.rows, " x ", operand.cols, " grouped along ",
      operand.axis == NmAxis::kRows ? "rows" : "columns");
  const Matrix dense = nm_decompress(operand);
  std::vector<uint16_t> bf16(static_cast<size_t>(dense.size()));
  f32_to_bf16({dense.data(), bf16.size()}, bf16);
  detail::DeviceBuffer<uint16_t> d(bf16.size());
  d.upload(bf16.data(), bf16.size());
  set_sparse_operand(d.get());
  detail::sync_checked("Sparse24Gemm::set_sparse_operand");
}

void Sparse24Gemm::run(const void* dense_bf16, void* result_bf16) {
  Impl& s = *impl_;
  NMS_CHECK(s.operand_set, "Sparse24Gemm::run before set_sparse_operand");
  const float alpha = 1.0f;
  const float beta = 0.0f;
  NMS_CUSPARSELT_CHECK(cusparseLtMatmul(&s.handle, &s.plan, &alpha, s.compressed.get(), dense_bf16,
                                        &beta, result_bf16, result_bf16, s.workspace.get(), nullptr,
                                        0));
}

#else  // !NMS_HAVE_CUSPARSELT

namespace {
constexpr const char* kNoCusparselt =
    "nmsparse_cuda was built without cuSPARSELt: run scripts/install-deps.sh --cuda (PyPI "
    "nvidia-cusparselt-cu13) or pass -DNMS_CUSPARSELT_ROOT=DIR, then reconfigure";
}

bool sparse_gemm_available(std::string* why) {
  if (why != nullptr) *why = kNoCusparselt;
  return false;
}

struct Sparse24Gemm::Impl {};

Sparse24Gemm::Sparse24Gemm(TrainingGemm, GemmShape, bool) {
  NMS_THROW(kNoCusparselt);
}
Sparse24Gemm::~Sparse24Gemm() = default;
void Sparse24Gemm::set_sparse_operand(const void*) {
  NMS_THROW(kNoCusparselt);
}
void Sparse24Gemm::set_sparse_operand(const CompressedNm&) {
  NMS_THROW(kNoCusparselt);
}
void Sparse24Gemm::run(const void*, void*) {
  NMS_THROW(kNoCusparselt);
}

#endif

}  // namespace nms::cuda
