// PRIVATE header: brute-force oracle for transposable N:M tiles (tests only).
#pragma once

#include <cstdint>

namespace nms::reference {

struct TileOptimum {
  double objective = 0.0;  // sum of kept scores, in double, summed in row-major order
  uint64_t bits = 0;       // bit (r * m + c) set = keep (r, c)
};

// Exact optimum of one m x m tile (row-major `tile`, m <= 5) with exactly n kept in every row
// and column, by depth-first enumeration: each row chooses an n-subset of the columns that still
// have capacity, and a branch dies as soon as some column needs more rows than remain. Among equal
// objectives the first in enumeration order wins (rows in order, subsets in increasing bit order).
TileOptimum transposable_tile_bruteforce(const double* tile, int n, int m);

}  // namespace nms::reference
