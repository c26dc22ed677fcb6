// Test helper: f() must throw nms::Error whose message contains `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "nmsparse/core/error.h"

namespace nms::testing {

template <class F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace nms::testing
