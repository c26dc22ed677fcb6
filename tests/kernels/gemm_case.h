// Test helper: one Y = X · Aᵀ case of the N:M GEMM tests (nm_gemm, nm_gemm_bf16) and its name.
#pragma once

#include <cstdint>
#include <string>

#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms::testing {

struct GemmCase {
  int64_t tokens, depth, rows;
  NmPattern pattern;
  NmAxis axis;  // kRows: A = D (forward); kCols: A = Dᵀ (backward-data)
};

inline std::string describe(const GemmCase& c) {
  return c.pattern.to_string() + " " + std::string(axis_name(c.axis)) + " T" +
         std::to_string(c.tokens) + " K" + std::to_string(c.depth) + " R" + std::to_string(c.rows);
}

}  // namespace nms::testing
