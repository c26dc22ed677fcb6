// Instruction-set levels for runtime dispatch.
//
// Kernels that have ISA-specific versions pick one with isa_active(): the best level the CPU and
// the operating system support, lowered (never raised) by the environment variable
// NMSPARSE_ISA=scalar|avx2|avx512 or by set_isa(). Every level computes bit-identical results;
// `scalar` selects the plain reference code paths.
//   avx512  AVX-512 F + BW + DQ + VL, BMI2, POPCNT (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4)
//   avx2    AVX2 + FMA + BMI2 (kernels without an AVX2 version run their SSE2 or scalar path)
//   scalar  no SIMD-specific code
#pragma once

#include <optional>
#include <string_view>

namespace nms {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// "scalar" / "avx2" / "avx512".
std::string_view isa_name(Isa isa);
// Inverse of isa_name; nullopt for anything else.
std::optional<Isa> isa_from_name(std::string_view name);

// The best level this CPU and OS support (CPUID and XCR0, read once).
Isa isa_supported();

// The level kernels use now: set_isa()'s value if set, else NMSPARSE_ISA if set, else
// isa_supported(). Throws nms::Error naming the value when NMSPARSE_ISA is not a level name or
// asks for a level the CPU lacks.
Isa isa_active();

// Overrides the active level for the whole process (tests, benchmarks); nullopt returns to the
// default. Throws when `isa` is above isa_supported().
void set_isa(std::optional<Isa> isa);

// Sets the level for a scope and restores the previous override on exit.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  std::optional<Isa> previous_;
};

}  // namespace nms
