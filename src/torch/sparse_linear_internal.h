// Private: the entry point of SparseLinear's autograd function.
#pragma once

#include <torch/torch.h>

#include "nmsparse/torch/sparse_linear.h"

namespace nms {

// Updates the layer's masks when due (training mode, grad enabled), then runs the forward GEMM
// through the autograd function of the layer's config. x [..., in].
torch::Tensor sparse_linear_apply(SparseLinearImpl& layer, const torch::Tensor& x);

}  // namespace nms
