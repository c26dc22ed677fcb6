#include "nmsparse/core/nm_pattern.h"

#include <gtest/gtest.h>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

TEST(NmPattern, ParsesKeptColonGroup) {
  const NmPattern p = NmPattern::parse("2:4");
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.m, 4);
  EXPECT_DOUBLE_EQ(p.density(), 0.5);
  EXPECT_DOUBLE_EQ(NmPattern::parse("1:4").sparsity(), 0.75);
  EXPECT_EQ(NmPattern::parse("16:32").to_string(), "16:32");
  EXPECT_EQ(NmPattern::parse("64:64").m, 64);
  EXPECT_EQ(NmPattern::parse("1:1").index_bits(), 0);
}

TEST(NmPattern, IndexBitsIsCeilLog2) {
  const int expected[] = {0, 0, 1, 2, 2, 3, 3, 3, 3, 4};  // m = 0 (unused), 1 .. 9
  for (int m = 1; m <= 9; ++m) EXPECT_EQ(NmPattern::make(1, m).index_bits(), expected[m]) << m;
  EXPECT_EQ(NmPattern::make(1, 16).index_bits(), 4);
  EXPECT_EQ(NmPattern::make(1, 17).index_bits(), 5);
  EXPECT_EQ(NmPattern::make(1, 64).index_bits(), 6);
}

void expect_error(std::string_view text, const std::string& fragment) {
  try {
    NmPattern::parse(text);
    ADD_FAILURE() << "accepted '" << text << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nexpected fragment: " << fragment;
  }
}

TEST(NmPattern, RejectsInvalidWithClearMessages) {
  expect_error("4:2", "kept count n (4) exceeds group size m (2)");
  expect_error("0:4", "kept count n (0) must be at least 1");
  expect_error("2:128", "group size m (128) must be in [1, 64]");
  expect_error("2:0", "group size m (0)");
  expect_error("2-4", "malformed pattern '2-4'");
  expect_error("2:", "malformed pattern");
  expect_error(":4", "malformed pattern");
  expect_error("a:b", "malformed pattern");
  expect_error("2:4x", "malformed pattern");
  expect_error("-2:4", "kept count n (-2)");
  expect_error("99999999999:4", "malformed pattern");
  expect_error("", "malformed pattern");
}

}  // namespace
}  // namespace nms
