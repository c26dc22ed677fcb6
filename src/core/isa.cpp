// Runtime ISA selection (see nmsparse/core/isa.h).
#include "nmsparse/core/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

// -1: no override; otherwise the Isa value.
std::atomic<int> g_override{-1};

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's __builtin_cpu_supports checks XCR0 too: AVX-512 counts only when the OS saves the
  // zmm / opmask state.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    return Isa::kAvx2;
  }
#endif
  return Isa::kScalar;
}

Isa from_environment(Isa supported) {
  const char* env = std::getenv("NMSPARSE_ISA");
  if (env == nullptr || *env == '\0') return supported;
  const std::optional<Isa> wanted = isa_from_name(env);
  NMS_CHECK(wanted.has_value(), "NMSPARSE_ISA=", std::string(env),
            " is not one of scalar, avx2, avx512");
  NMS_CHECK(*wanted <= supported, "NMSPARSE_ISA=", std::string(env),
            " asks for more than this CPU supports (", isa_name(supported), ")");
  return *wanted;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

Isa isa_supported() {
  static const Isa supported = detect();
  return supported;
}

Isa isa_active() {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Isa>(forced);
  return from_environment(isa_supported());
}

void set_isa(std::optional<Isa> isa) {
  if (isa.has_value()) {
    NMS_CHECK(*isa <= isa_supported(), "ISA level ", isa_name(*isa),
              " is above what this CPU supports (", isa_name(isa_supported()), ")");
  }
  g_override.store(isa.has_value() ? static_cast<int>(*isa) : -1, std::memory_order_relaxed);
}

ScopedIsa::ScopedIsa(Isa isa) {
  const int forced = g_override.load(std::memory_order_relaxed);
  if (forced >= 0) previous_ = static_cast<Isa>(forced);
  set_isa(isa);
}

ScopedIsa::~ScopedIsa() {
  set_isa(previous_);
}

}  // namespace nms
