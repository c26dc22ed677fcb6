#include "nmsparse/core/error.h"

#include <gtest/gtest.h>

#include <limits>

namespace nms {
namespace {

void refuse(int value) {
  NMS_CHECK(value > 0, "value (", value, ") must be positive");
}

TEST(Error, CheckNamesFunctionAndValue) {
  try {
    refuse(-3);
    FAIL() << "expected nms::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "refuse: value (-3) must be positive");
  }
  EXPECT_NO_THROW(refuse(1));
}

TEST(Error, CheckedArithmetic) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(detail::mul_checked(1 << 20, 1 << 20, "x"), int64_t{1} << 40);
  EXPECT_THROW(detail::mul_checked(kMax / 2 + 1, 2, "x"), Error);
  EXPECT_THROW(detail::mul_checked(-1, 2, "x"), Error);
  EXPECT_THROW(detail::add_checked(kMax, 1, "x"), Error);
  EXPECT_EQ(detail::add_checked(kMax - 1, 1, "x"), kMax);
}

TEST(ErrorDeathTest, AssertAborts) {
  EXPECT_DEATH(NMS_ASSERT(1 + 1 == 3, "arithmetic"), "assertion '1 \\+ 1 == 3' failed: arithmetic");
}

}  // namespace
}  // namespace nms
