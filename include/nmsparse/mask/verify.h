// Verification of N:M structure, in both directions.
//
// An element is "kept" when its mask bit is set, or, for a weight matrix, when it is nonzero
// (-0.0 counts as zero). For pattern n:m and a rows x cols matrix:
//   row groups:    m consecutive columns of one row (the forward GEMM's reduction axis),
//                  valid when at most n are kept; needs cols % m == 0.
//   column groups: m consecutive rows of one column (the backward-data GEMM's reduction axis);
//                  needs rows % m == 0.
//   tiles:         m x m blocks at (m*a, m*b); a tile is valid when each of its m rows and m
//                  columns keeps at most n. A tile's rows are row groups and its columns are
//                  column groups, so "every tile valid" == "rows valid and columns valid": the
//                  transposable condition (both W and W^T are N:M).
// Validity is "<= n"; exact solvers optimise "= n", which the report's group_fill says.
//
// Complexity O(rows * cols) bit operations; memory O(cols / m) counters.
#pragma once

#include <cstdint>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {

struct NmViolation {
  int64_t row = -1;  // the first offending group, in row-major scan order; -1 when none
  int64_t col = -1;  // first element of that group
  int64_t kept = 0;  // how many it keeps (> n)
};

struct NmVerifyReport {
  NmPattern pattern;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t kept = 0;  // kept elements in the whole matrix

  bool rows_applicable = false;  // cols % m == 0
  int64_t row_groups = 0;
  int64_t row_violations = 0;   // row groups keeping more than n
  int64_t row_groups_full = 0;  // row groups keeping exactly n
  NmViolation first_row_violation;

  bool cols_applicable = false;  // rows % m == 0
  int64_t col_groups = 0;
  int64_t col_violations = 0;
  int64_t col_groups_full = 0;
  NmViolation first_col_violation;

  bool tiles_applicable = false;  // both
  int64_t tiles = 0;
  int64_t tile_violations = 0;  // tiles with at least one row or column keeping more than n

  double density() const {
    return rows * cols == 0 ? 0.0 : static_cast<double>(kept) / static_cast<double>(rows * cols);
  }
  double sparsity() const { return 1.0 - density(); }
  bool rows_valid() const { return rows_applicable && row_violations == 0; }
  bool cols_valid() const { return cols_applicable && col_violations == 0; }
  bool transposable_valid() const { return tiles_applicable && tile_violations == 0; }
};

NmVerifyReport verify_nm(const BitMask& kept, NmPattern pattern);
NmVerifyReport verify_nm(ConstMatrixViewF weights, NmPattern pattern);  // kept = nonzero

// Mask of the nonzero entries (-0.0 is zero).
BitMask nonzero_mask(ConstMatrixViewF weights);

// sum |dense_ij| over kept (i, j) / sum |dense_ij|, in double; 1.0 for an all-zero matrix.
double kept_mass_fraction(ConstMatrixViewF dense, const BitMask& kept);

}  // namespace nms
