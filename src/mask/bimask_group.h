// PRIVATE header: bit-parallel scoring of one Bi-Mask column group (m rows of forward-mask words).
//
// For the m row words x_0 .. x_{m-1} of one 64-column word, the "at least t kept" bitmaps follow
// c_t |= c_{t-1} & x (t from high to low, c_0 = all ones). Then, per column, min(count, n) =
// sum_{t<=n} [count >= t], so kept = sum_{t<=n} popcount(c_t) and the column is eligible when
// c_{n+1} is clear.
#pragma once

#include <bit>
#include <cstdint>

#include "nmsparse/mask/bimask.h"

namespace nms::detail {

// kN / kM > 0: compile-time pattern (unrolled); 0: use n / m.
template <int kN, int kM>
[[gnu::always_inline]] inline BiMaskScore score_group_t(const uint64_t* const* rows, int n_rt,
                                                        int m_rt, int64_t words,
                                                        uint64_t last_valid) {
  const int n = kN > 0 ? kN : n_rt;
  const int m = kM > 0 ? kM : m_rt;
  int64_t kept = 0;
  int64_t eligible = 0;
  uint64_t c[kMaxGroupSize + 2];
  for (int64_t w = 0; w < words; ++w) {
    for (int t = 1; t <= n + 1; ++t) c[t] = 0;
    for (int r = 0; r < m; ++r) {
      const uint64_t x = rows[r][w];
      for (int t = n + 1; t >= 2; --t) c[t] |= c[t - 1] & x;
      c[1] |= x;
    }
    for (int t = 1; t <= n; ++t) kept += std::popcount(c[t]);
    const uint64_t valid = w + 1 == words ? last_valid : ~uint64_t{0};
    eligible += std::popcount(~c[n + 1] & valid);
  }
  return {kept, eligible};
}

// Baseline x86-64 has no popcount instruction (GCC then calls __popcountdi2, measured ~25 % of a
// 2:4 search); the popcnt variants are chosen at run time when the CPU has it.
template <int kN, int kM>
BiMaskScore score_group_plain(const uint64_t* const* rows, int n, int m, int64_t words,
                              uint64_t last_valid) {
  return score_group_t<kN, kM>(rows, n, m, words, last_valid);
}
#if defined(__x86_64__) && defined(__GNUC__)
template <int kN, int kM>
[[gnu::target("popcnt")]] BiMaskScore score_group_popcnt(const uint64_t* const* rows, int n, int m,
                                                         int64_t words, uint64_t last_valid) {
  return score_group_t<kN, kM>(rows, n, m, words, last_valid);
}
#endif

using GroupScoreFn = BiMaskScore (*)(const uint64_t* const*, int, int, int64_t, uint64_t);

template <template <int, int> class Pick>
GroupScoreFn pick_group_score(NmPattern p) {
  if (p.n == 2 && p.m == 4) return Pick<2, 4>::fn;
  if (p.n == 1 && p.m == 4) return Pick<1, 4>::fn;
  if (p.n == 4 && p.m == 8) return Pick<4, 8>::fn;
  if (p.n == 1 && p.m == 2) return Pick<1, 2>::fn;
  if (p.n == 2 && p.m == 8) return Pick<2, 8>::fn;
  if (p.n == 8 && p.m == 16) return Pick<8, 16>::fn;
  return Pick<0, 0>::fn;
}
template <int kN, int kM>
struct PlainScore {
  static constexpr GroupScoreFn fn = &score_group_plain<kN, kM>;
};
#if defined(__x86_64__) && defined(__GNUC__)
template <int kN, int kM>
struct PopcntScore {
  static constexpr GroupScoreFn fn = &score_group_popcnt<kN, kM>;
};
#endif

inline GroupScoreFn group_score_fn(NmPattern p) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("popcnt")) return pick_group_score<PopcntScore>(p);
#endif
  return pick_group_score<PlainScore>(p);
}

// Valid bits of the last word of a row of `cols` columns (all ones when cols % 64 == 0).
inline uint64_t last_word_valid(int64_t cols) {
  const int r = static_cast<int>(cols & 63);
  return r == 0 ? ~uint64_t{0} : (uint64_t{1} << r) - 1;
}

}  // namespace nms::detail
