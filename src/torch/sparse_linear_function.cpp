#include "nmsparse/torch/sparse_linear.h"
#include "torch/sparse_linear_internal.h"

namespace nms {
torch::Tensor sparse_linear_apply(SparseLinearImpl& layer, const torch::Tensor& x) {
  return torch::nn::functional::linear(x, layer.weight, layer.bias);
}
SparseLinearProfile sparse_linear_profile() {
  return {};
}
void sparse_linear_profile_reset() {}
}  // namespace nms
