// PRIVATE header: obviously-correct reference for the standard N:M mask (tests and `verify` only).
#pragma once

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms::reference {

// Per group: stable sort of the m indices by descending score (so equal scores keep the lower
// index first), keep the first n. No validation beyond shape; scores must not be NaN.
BitMask mask_nm_rows(ConstMatrixViewF scores, NmPattern pattern);

}  // namespace nms::reference
