// PRIVATE header: canonical 2:4 slot codes, shared by the SSE2 and AVX-512 MVUE kernels (plain
// data only: the AVX-512 translation unit must not instantiate inline functions other units use).
#pragma once

#include <cstdint>

namespace nms::detail {

// kCode24[mask] for the kept positions `mask` (bit i = element i kept, at most 2 set) is the
// compressed group's index code idx0 | idx1 << 2: the kept positions plus the lowest free ones,
// ascending (nm_compress's canonical fill). Masks with 3 or 4 bits never occur; they map to the
// two lowest kept positions.
inline constexpr uint8_t kCode24[16] = {4, 4, 4, 4, 8, 8, 9, 4, 12, 12, 13, 4, 14, 8, 9, 4};

// The rule kCode24 tabulates, checked at compile time below.
constexpr int code24_rule(int mask) {
  int keep = mask;
  int count = 0;
  for (int i = 0; i < 4; ++i) count += (mask >> i) & 1;
  for (int i = 0; i < 4 && count < 2; ++i) {
    if (!((keep >> i) & 1)) {
      keep |= 1 << i;
      ++count;
    }
  }
  int slot = 0;
  int code = 0;
  for (int i = 0; i < 4; ++i) {
    if (((keep >> i) & 1) && slot < 2) code |= i << (2 * slot++);
  }
  return code;
}

constexpr bool code24_table_matches_rule() {
  for (int mask = 0; mask < 16; ++mask) {
    if (kCode24[mask] != code24_rule(mask)) return false;
  }
  return true;
}
static_assert(code24_table_matches_rule());

}  // namespace nms::detail
