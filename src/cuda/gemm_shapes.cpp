// Names and operand shapes of the training GEMMs (host code without CUDA: the host tests compile
// it too).
#include "cuda/gemm_layout.h"
#include "nmsparse/cuda/sparse_gemm.h"

namespace nms::cuda {

std::string_view training_gemm_name(TrainingGemm gemm) {
  switch (gemm) {
    case TrainingGemm::kForward:
      return "forward";
    case TrainingGemm::kBackwardData:
      return "backward_data";
    case TrainingGemm::kWeightGrad:
      return "weight_grad";
  }
  return "?";
}

GemmOperands gemm_operands(TrainingGemm gemm, GemmShape s) {
  (void)detail::gemm_layout(gemm, s);  // validates the shape
  switch (gemm) {
    case TrainingGemm::kForward:
      return {s.out, s.in, s.tokens, s.in, s.tokens, s.out};
    case TrainingGemm::kBackwardData:
      return {s.out, s.in, s.tokens, s.out, s.tokens, s.in};
    case TrainingGemm::kWeightGrad:
      return {s.tokens, s.out, s.tokens, s.in, s.in, s.out};
  }
  NMS_THROW("unknown TrainingGemm ", static_cast<int>(gemm));
}

}  // namespace nms::cuda
