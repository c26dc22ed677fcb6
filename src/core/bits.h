// PRIVATE header: bit helpers for nmsparse's translation units compiled for the x86-64 baseline.
#pragma once

#include <bit>
#include <cstdint>

namespace nms::detail {

// Population count that stays inline without POPCNT (not in the x86-64 baseline, where
// std::popcount becomes a libgcc call that showed up at 4% of compress time).
inline int popcount64(uint64_t x) {
#if defined(__POPCNT__) || !defined(__x86_64__)
  return std::popcount(x);
#else
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
#endif
}

}  // namespace nms::detail
