// PRIVATE header: obviously-correct reference implementations of the compressed N:M format.
//
// These are the executable specification of docs/format.md: one element and one bit at a time,
// no tables, no threads. Tests hold the optimised nm_compress / nm_compress_masked /
// nm_decompress against them bit for bit. They are slow (O(rows * cols * m)) and only for tests,
// tools that verify, and debugging.
#pragma once

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms::reference {

// Same contract and same results as nm_compress (throws nms::Error on the same inputs; messages
// may differ).
CompressedNm nm_compress_reference(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis);

// Same contract and same results as nm_compress_masked.
CompressedNm nm_compress_masked_reference(ConstMatrixViewF dense, const BitMask& mask,
                                          NmPattern pattern, NmAxis axis);

// Same result as nm_decompress for a canonical input. Only checks sizes (NMS_CHECK) and that
// indices are < m; does not require canonical order (later slots overwrite earlier ones).
Matrix nm_decompress_reference(const CompressedNm& src);

// Bit-by-bit reader of the index stream: index of slot `slot` in value row `value_row`.
int index_reference(const CompressedNm& c, int64_t value_row, int64_t slot);

}  // namespace nms::reference
