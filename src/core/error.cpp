#include "nmsparse/core/error.h"

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace nms::detail {

void throw_error(const char* func, const std::string& message) {
  throw Error(std::string(func) + ": " + message);
}

void assert_fail(const char* expr, const char* file, int line, const char* func,
                 const std::string& message) {
  std::fprintf(stderr, "nmsparse internal error: %s:%d in %s: assertion '%s' failed%s%s\n", file,
               line, func, expr, message.empty() ? "" : ": ", message.c_str());
  std::abort();
}

int64_t mul_checked(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) {
    throw Error(concat("mul_checked: ", what, " overflows or is negative (", a, " x ", b, ")"));
  }
  return r;
}

int64_t add_checked(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) {
    throw Error(concat("add_checked: ", what, " overflows or is negative (", a, " + ", b, ")"));
  }
  return r;
}

}  // namespace nms::detail
