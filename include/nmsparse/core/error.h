// nmsparse error model.
//
// One exception type, nms::Error, for everything a caller can cause: bad shapes, bad patterns,
// corrupt files, unwritable paths. Its message always starts with the function that refused and
// names the offending values, e.g.
//   "mask_nm_rows: cols (10) is not a multiple of m (4)".
//
// Three macros:
//   NMS_CHECK(cond, msg...)   user input; always on; throws nms::Error.
//   NMS_ASSERT(cond, msg...)  internal invariant; always on; prints and aborts (a bug, not input).
//   NMS_DCHECK(cond, msg...)  hot-path invariant; compiled only without NDEBUG (debug, sanitizers).
// The message arguments are streamed with operator<< and only evaluated on failure.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace nms {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

[[noreturn]] void throw_error(const char* func, const std::string& message);
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const char* func,
                              const std::string& message);

// a * b for sizes, throwing instead of wrapping. `what` names the quantity in the message.
int64_t mul_checked(int64_t a, int64_t b, const char* what);
// a + b for sizes, throwing instead of wrapping.
int64_t add_checked(int64_t a, int64_t b, const char* what);

}  // namespace detail
}  // namespace nms

#define NMS_CHECK(cond, ...)                                                    \
  do {                                                                          \
    if (!(cond)) [[unlikely]] {                                                 \
      ::nms::detail::throw_error(__func__, ::nms::detail::concat(__VA_ARGS__)); \
    }                                                                           \
  } while (0)

#define NMS_THROW(...) ::nms::detail::throw_error(__func__, ::nms::detail::concat(__VA_ARGS__))

#define NMS_ASSERT(cond, ...)                                                           \
  do {                                                                                  \
    if (!(cond)) [[unlikely]] {                                                         \
      ::nms::detail::assert_fail(#cond, __FILE__, __LINE__, __func__,                   \
                                 ::nms::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                   \
  } while (0)

#ifdef NDEBUG
#define NMS_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#else
#define NMS_DCHECK(cond, ...) NMS_ASSERT(cond __VA_OPT__(, ) __VA_ARGS__)
#endif
