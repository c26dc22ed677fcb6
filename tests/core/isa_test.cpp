// Runtime ISA selection: names, the NMSPARSE_ISA override and its errors, scoped overrides.
#include "nmsparse/core/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "testing/expect_error.h"

namespace nms {
namespace {

// Sets NMSPARSE_ISA for a scope (nullptr: unset) and restores the previous value.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) {
    const char* old = std::getenv("NMSPARSE_ISA");
    if (old != nullptr) previous_ = old;
    had_ = old != nullptr;
    if (value != nullptr) {
      setenv("NMSPARSE_ISA", value, 1);
    } else {
      unsetenv("NMSPARSE_ISA");
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv("NMSPARSE_ISA", previous_.c_str(), 1);
    } else {
      unsetenv("NMSPARSE_ISA");
    }
  }

 private:
  std::string previous_;
  bool had_ = false;
};

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    EXPECT_EQ(isa_from_name(isa_name(isa)), isa);
  }
  EXPECT_FALSE(isa_from_name("AVX512").has_value());
  EXPECT_FALSE(isa_from_name("").has_value());
}

TEST(Isa, EnvironmentLowersTheLevel) {
  {
    ScopedEnv env(nullptr);
    EXPECT_EQ(isa_active(), isa_supported());
  }
  {
    ScopedEnv env("scalar");
    EXPECT_EQ(isa_active(), Isa::kScalar);
  }
  {
    ScopedEnv env("sse9");
    testing::expect_error([] { (void)isa_active(); }, "NMSPARSE_ISA=sse9 is not one of");
  }
  if (isa_supported() < Isa::kAvx512) {
    ScopedEnv env("avx512");
    testing::expect_error([] { (void)isa_active(); }, "more than this CPU supports");
    EXPECT_THROW(set_isa(Isa::kAvx512), Error);
  }
}

TEST(Isa, ScopedOverrideWinsAndRestores) {
  ScopedEnv env("sse9");  // ignored while an override is set
  {
    ScopedIsa outer(Isa::kScalar);
    EXPECT_EQ(isa_active(), Isa::kScalar);
    {
      ScopedIsa inner(isa_supported());
      EXPECT_EQ(isa_active(), isa_supported());
    }
    EXPECT_EQ(isa_active(), Isa::kScalar);
  }
  EXPECT_THROW((void)isa_active(), Error);  // back to the (bad) environment
}

}  // namespace
}  // namespace nms
