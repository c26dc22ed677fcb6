// Test helper: two nm_gemm operands compared buffer by buffer, byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <cstring>

#include "nmsparse/kernels/nm_gemm.h"

namespace nms::testing {

// Each operand holds one form (entries or lanes); an empty buffer has no data pointer, which
// memcmp must not get.
template <class T>
void expect_same_buffer(const AlignedBuffer<T>& got, const AlignedBuffer<T>& want,
                        const char* name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  if (want.size() > 0) {
    ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(T) * want.size()), 0) << name;
  }
}

inline void expect_same_operand(const NmGemmOperand& got, const NmGemmOperand& want) {
  ASSERT_EQ(got.rows, want.rows);
  ASSERT_EQ(got.depth, want.depth);
  ASSERT_EQ(got.pattern, want.pattern);
  ASSERT_EQ(got.depth_block, want.depth_block);
  expect_same_buffer(got.packed, want.packed, "packed");
  expect_same_buffer(got.shared, want.shared, "shared");
  expect_same_buffer(got.lane_values, want.lane_values, "lane_values");
  expect_same_buffer(got.lane_index, want.lane_index, "lane_index");
}

}  // namespace nms::testing
