#include "nmsparse/mask/diversity.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

// Unsigned big integer, little-endian 32-bit limbs; only what the counting needs.
class BigUint {
 public:
  BigUint() = default;
  explicit BigUint(uint64_t v) {
    while (v != 0) {
      limbs_.push_back(static_cast<uint32_t>(v));
      v >>= 32;
    }
  }
  // *this += x * k
  void add_product(const BigUint& x, uint64_t k) {
    const uint64_t k_lo = static_cast<uint32_t>(k);
    const uint64_t k_hi = k >> 32;
    add_shifted_product(x, k_lo, 0);
    if (k_hi != 0) add_shifted_product(x, k_hi, 1);
  }
  void multiply(uint64_t k) {
    BigUint r;
    r.add_product(*this, k);
    *this = std::move(r);
  }
  std::string decimal() const {
    if (limbs_.empty()) return "0";
    std::vector<uint32_t> v = limbs_;
    std::string digits;
    while (!v.empty()) {  // repeated division by 10^9
      uint64_t rem = 0;
      for (size_t i = v.size(); i-- > 0;) {
        const uint64_t cur = (rem << 32) | v[i];
        v[i] = static_cast<uint32_t>(cur / 1000000000u);
        rem = cur % 1000000000u;
      }
      while (!v.empty() && v.back() == 0) v.pop_back();
      for (int d = 0; d < 9; ++d) {
        digits.push_back(static_cast<char>('0' + rem % 10));
        rem /= 10;
        if (v.empty() && rem == 0) break;
      }
    }
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    std::reverse(digits.begin(), digits.end());
    return digits;
  }
  double log10() const {
    if (limbs_.empty()) return -INFINITY;
    // Top two limbs give 53+ significant bits.
    const size_t n = limbs_.size();
    double top = limbs_[n - 1];
    if (n >= 2) top = top * 4294967296.0 + limbs_[n - 2];
    const double shift = 32.0 * static_cast<double>(n >= 2 ? n - 2 : 0);
    return std::log10(top) + shift * std::log10(2.0);
  }

 private:
  void add_shifted_product(const BigUint& x, uint64_t k32, size_t shift) {
    if (k32 == 0 || x.limbs_.empty()) return;
    if (limbs_.size() < x.limbs_.size() + shift + 1) limbs_.resize(x.limbs_.size() + shift + 1, 0);
    uint64_t carry = 0;
    size_t i = 0;
    for (; i < x.limbs_.size(); ++i) {
      const uint64_t cur = static_cast<uint64_t>(limbs_[i + shift]) + x.limbs_[i] * k32 + carry;
      limbs_[i + shift] = static_cast<uint32_t>(cur);
      carry = cur >> 32;
    }
    for (size_t j = i + shift; carry != 0; ++j) {
      if (j == limbs_.size()) limbs_.push_back(0);
      const uint64_t cur = static_cast<uint64_t>(limbs_[j]) + carry;
      limbs_[j] = static_cast<uint32_t>(cur);
      carry = cur >> 32;
    }
    while (!limbs_.empty() && limbs_.back() == 0) limbs_.pop_back();
  }

  std::vector<uint32_t> limbs_;
};

// C(a, b) for 0 <= b <= a <= 64 from Pascal's triangle: every entry is at most C(64, 32) < 2^64,
// so the sums never overflow.
uint64_t binomial(int a, int b) {
  static const auto table = [] {
    std::array<std::array<uint64_t, 65>, 65> t{};
    for (int i = 0; i <= 64; ++i) {
      t[i][0] = 1;
      for (int k = 1; k <= i; ++k) t[i][k] = t[i - 1][k - 1] + (k <= i - 1 ? t[i - 1][k] : 0);
    }
    return t;
  }();
  return b < 0 || b > a ? 0 : table[static_cast<size_t>(a)][static_cast<size_t>(b)];
}

MaskDiversity from_big(const BigUint& b) {
  return {b.decimal(), b.log10()};
}

// One row of the DP: every way to give this row n ones in distinct columns, the columns taken
// from the classes a[1..n] (a[j] = columns still needing j ones), processed from class n down so
// that columns moving from class j into j - 1 are not picked again in the same row.
using State = std::array<uint8_t, kMaxTransposableDiversityM + 1>;  // fixed size: cheap keys

void place_row(const State& a, const BigUint& ways, int j, int remaining, int moved,
               uint64_t multiplicity, State& next, std::map<State, BigUint>& out) {
  if (j == 0) {
    if (remaining != 0) return;
    next[0] = static_cast<uint8_t>(a[0] + moved);
    out[next].add_product(ways, multiplicity);
    return;
  }
  for (int k = 0; k <= std::min<int>(a[j], remaining); ++k) {
    next[j] = static_cast<uint8_t>(a[j] - k + moved);
    place_row(a, ways, j - 1, remaining - k, k, multiplicity * binomial(a[j], k), next, out);
  }
}

}  // namespace

MaskDiversity diversity_rowwise_tile(NmPattern pattern) {
  pattern.validate();
  BigUint count(1);
  const uint64_t per_row = binomial(pattern.m, pattern.n);
  for (int r = 0; r < pattern.m; ++r) count.multiply(per_row);
  return from_big(count);
}

MaskDiversity diversity_transposable_tile(NmPattern pattern) {
  pattern.validate();
  const int m = pattern.m;
  const int n = pattern.n;
  NMS_CHECK(m <= kMaxTransposableDiversityM,
            "exact transposable diversity is computed up to m = ", kMaxTransposableDiversityM,
            " (pattern ", pattern.to_string(),
            "); the count is a dynamic program whose state space explodes beyond");
  std::map<State, BigUint> states;
  State start{};
  start[static_cast<size_t>(n)] = static_cast<uint8_t>(m);
  states[start] = BigUint(1);
  for (int row = 0; row < m; ++row) {
    std::map<State, BigUint> next_states;
    State next{};
    for (const auto& [a, ways] : states) place_row(a, ways, n, n, 0, 1, next, next_states);
    states = std::move(next_states);
  }
  State done{};
  done[0] = static_cast<uint8_t>(m);
  const auto it = states.find(done);
  NMS_ASSERT(it != states.end(), "no transposable mask for ", pattern.to_string());
  return from_big(it->second);
}

}  // namespace nms
