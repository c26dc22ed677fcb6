// Compressed N:M sparse matrices: kept values plus a packed stream of in-group indices.
//
// A dense matrix W (rows x cols, fp32) is N:M sparse along an axis when every group of m
// consecutive elements along that axis holds at most n nonzeros (n = kept, m = group; "2:4" keeps
// 2 of every 4). The compressed form stores, for each group, exactly n values and the n positions
// (0 .. m-1) they came from. docs/format.md is the full specification; in short:
//
//   axis kRows  groups run along each row (W[out, in] in the forward GEMM: along `in`).
//               values  : (rows, cols / m * n), row-major, value row r = dense row r.
//   axis kCols  groups run along each column (the rows of W^T: backward-data GEMM).
//               values  : (cols, rows / m * n), row-major, value row c = dense column c
//               (the compressed transpose).
//   indices     : value_rows() rows of index_row_bytes() bytes. In value row v the slot k (group
//               k / n, k-th kept in order) owns bits [k * b, k * b + b) of that row's bit string,
//               b = pattern.index_bits() = ceil(log2 m); bit t of the string is bit (t % 8) of byte
//               t / 8 (LSB first, little-endian). Each row starts on a byte boundary; unused bits
//               at the end of a row are zero. b == 0 (m == 1) means no index bytes at all.
//
// Canonical form (the only form nm_validate accepts and nm_compress produces):
//   - every group stores exactly n slots whose indices are strictly increasing (so distinct);
//   - a group with fewer than n kept entries is padded with +0.0 values at the lowest positions
//     that are not kept;
//   - zeros are stored as +0.0 (-0.0 in the input becomes +0.0); NaN and Inf pass through
//   bit-exact.
// Consequently nm_decompress(nm_compress(x)) == x bit for bit, except that -0.0 reads back +0.0.
//
// Errors: every function throws nms::Error (message names the function and offending values) for
// invalid patterns, a compressed axis whose length m does not divide, shape mismatches, and
// groups over the limit. Complexity is O(rows * cols) time; no allocation per element.
// Results never depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {

// Which way the groups of m run. kRows: along each row; kCols: along each column.
enum class NmAxis { kRows, kCols };

// "rows" / "cols".
std::string_view axis_name(NmAxis axis);
// Inverse of axis_name; nullopt for anything else (exact, case-sensitive).
std::optional<NmAxis> axis_from_name(std::string_view name);

struct CompressedNm {
  int64_t rows = 0;  // dense shape
  int64_t cols = 0;
  NmPattern pattern;
  NmAxis axis = NmAxis::kRows;
  AlignedBuffer<float> values;     // (value_rows(), value_cols()), row-major, ld == value_cols()
  AlignedBuffer<uint8_t> indices;  // (value_rows(), index_row_bytes()), layout above

  // Length of the grouped axis: cols for kRows, rows for kCols.
  int64_t axis_length() const { return axis == NmAxis::kRows ? cols : rows; }
  // Number of value rows: rows for kRows, cols for kCols.
  int64_t value_rows() const { return axis == NmAxis::kRows ? rows : cols; }
  // Kept slots per value row: axis_length() / m * n.
  int64_t value_cols() const;
  // Groups per value row: axis_length() / m.
  int64_t groups_per_row() const { return axis_length() / pattern.m; }
  // Bytes of one index row: ceil(value_cols() * index_bits / 8).
  int64_t index_row_bytes() const;
  // Exact size the layout requires: value_rows() * index_row_bytes().
  int64_t index_bytes() const;
  // Index (0 .. m-1, position inside its group) of slot `slot` of value row `value_row`.
  // Unchecked apart from NMS_DCHECK; for tests and tools, not inner loops.
  int index_at(int64_t value_row, int64_t slot) const;
  // Dense position (row, col) of slot `slot` of value row `value_row`.
  int64_t dense_row_of(int64_t value_row, int64_t slot) const;
  int64_t dense_col_of(int64_t value_row, int64_t slot) const;
};

// Compresses `dense` (rows x cols, any ld >= cols), every group of which (along `axis`) has at
// most pattern.n nonzeros (NaN and Inf count as nonzero; +0.0 and -0.0 as zero).
// Throws nms::Error if the pattern is invalid, if m does not divide the axis length, or if a group
// has too many nonzeros; the message names the first such group in value-row order (its row or
// column, group number, dense range, and nonzero count).
// kRows is a single pass with fast paths for m in {2, 4, 8}; parallel over rows. kCols goes
// through 256-column transposed tiles and is several times slower.
// Measured (2:4, 4096 x 4096, one thread, shared 2-core EPYC VM under load): 4.4-5.6 GB/s of fp32
// input into reused buffers (nm_compress_into); 1.5-1.7 GB/s with fresh buffers, where allocating
// and zero-filling the 36 MB result (page faults, AlignedBuffer) takes ~22 of the ~38 ms.
// Postcondition: nm_validate(result) passes; nm_decompress(result) == dense (with -0.0 -> +0.0).
CompressedNm nm_compress(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis = NmAxis::kRows);

// Compresses keeping exactly the positions set in `mask` (mask.rows() == dense.rows(),
// mask.cols() == dense.cols()); kept values are copied from `dense` even if zero (-0.0 is stored as
// +0.0). Every group of `mask` along `axis` must have at most n set bits; groups with fewer are
// padded as in the canonical form. Throws nms::Error on a shape mismatch, a non-divisible axis or
// an over-full mask group (naming the first one).
CompressedNm nm_compress_masked(ConstMatrixViewF dense, const BitMask& mask, NmPattern pattern,
                                NmAxis axis = NmAxis::kRows);

// As nm_compress / nm_compress_masked, writing into `dst` and reusing its buffers when they already
// have the right sizes (no allocation, no page faults: for re-packing the same layer every
// training step). On an exception `dst` has unspecified contents; do not use it.
void nm_compress_into(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis, CompressedNm& dst);
void nm_compress_masked_into(ConstMatrixViewF dense, const BitMask& mask, NmPattern pattern,
                             NmAxis axis, CompressedNm& dst);

// The mask of kept positions (rows x cols) of `src`: one bit per stored slot, padding included.
BitMask nm_kept_mask(const CompressedNm& src);

// Writes the dense matrix into `dst` (src.rows x src.cols, any ld >= cols); pruned entries become
// +0.0. Runs nm_validate(src) first (O(index_bytes)), so a corrupt struct throws instead of writing
// out of bounds.
void nm_decompress(const CompressedNm& src, MatrixViewF dst);
Matrix nm_decompress(const CompressedNm& src);

// Structural validation of a CompressedNm from outside (a file): pattern valid, rows/cols >= 0, m
// divides the axis length, values.size() == value_rows() * value_cols(), indices.size() ==
// index_bytes(), every index < m, indices strictly increasing within each group, unused bits at
// the end of each index row zero. Values are not inspected (NaN/Inf are legal). Throws nms::Error
// naming the first defect (value row, group, slot, offending index).
void nm_validate(const CompressedNm& c);

}  // namespace nms
