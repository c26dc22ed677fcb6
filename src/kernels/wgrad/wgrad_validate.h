// PRIVATE header: the operand checks of the weight-gradient entry points (nm_wgrad.h,
// nm_wgrad_bf16.h), shared by their routes that take dY dense (the fused pruning) and those that
// take its compression.
#pragma once

#include <cstdint>

#include "nmsparse/core/matrix_view.h"
#include "nmsparse/kernels/nm_wgrad.h"

namespace nms::detail {

// For dY with `tokens` rows and `out` columns: x has `tokens` rows, dw is [out, x.cols()] and
// overlaps neither x nor the decay's W, the decay's W has dw's shape and its mask a row stride of
// at least in. Throws nms::Error naming the values.
void validate_wgrad_operands(int64_t tokens, int64_t out, ConstMatrixViewF x, MatrixViewF dw,
                             const NmWgradDecay* decay);

}  // namespace nms::detail
