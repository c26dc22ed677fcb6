// Private: the entry point of SparseLinear's autograd function.
#pragma once

#include <torch/torch.h>

#include "nmsparse/grad/prune.h"
#include "nmsparse/torch/sparse_linear.h"

namespace nms {

// Updates the layer's masks when due (training mode, grad enabled), then runs the forward GEMM
// through the autograd function of the layer's config. x [..., in].
torch::Tensor sparse_linear_apply(SparseLinearImpl& layer, const torch::Tensor& x);

// Key of step `step`'s random draws: splitmix64(seed ^ splitmix64(step)).
uint64_t sparse_linear_step_seed(uint64_t seed, int64_t step);

// The options with which a layer (config, RNG stream) prunes dY [T, out] along tokens at `step`
// (both paths; tests recompute the pruned gradient with them).
GradPruneOptions sparse_linear_grad_options(const SparseLinearConfig& config, uint64_t stream,
                                            int64_t step);

}  // namespace nms
