// PRIVATE header: the plain reference of grad_prune (one group at a time, element access through
// the views, scalar Philox per group). Tests hold the optimised paths to it bit for bit.
#pragma once

#include "nmsparse/grad/prune.h"

namespace nms::detail {

Matrix grad_prune_reference(ConstMatrixViewF g, const GradPruneOptions& options);

}  // namespace nms::detail
