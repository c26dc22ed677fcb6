// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011).
//
// A draw is a pure function of (seed, stream, counter): no state, no sequence. nmsparse keys every
// random decision by (seed, tensor id, element index), so results are bitwise identical for any
// thread count and any iteration order. Mapping onto Philox's 2-word key and 4-word counter:
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { counter & 0xffffffff, counter >> 32, stream & 0xffffffff, stream >> 32 }
// One call yields 4 independent 32-bit words; CounterRng::uniform(i) uses word i % 4 of block i
// / 4.
//
// Verified against the published known-answer vectors (Random123 kat_vectors, "philox4x32 10").
#pragma once

#include <array>
#include <cstdint>

namespace nms {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The bare Philox4x32 bijection with 10 rounds.
constexpr PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = uint64_t{kMul0} * ctr[0];
    const uint64_t p1 = uint64_t{kMul1} * ctr[2];
    const auto hi0 = static_cast<uint32_t>(p0 >> 32);
    const auto lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32);
    const auto lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// Random words and uniforms for one (seed, stream) pair, addressed by a 64-bit counter.
class CounterRng {
 public:
  constexpr CounterRng(uint64_t seed, uint64_t stream)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        stream_lo_(static_cast<uint32_t>(stream)),
        stream_hi_(static_cast<uint32_t>(stream >> 32)) {}

  // Four 32-bit words for block `counter`.
  constexpr PhiloxCounter block(uint64_t counter) const {
    return philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                          stream_lo_, stream_hi_},
                         key_);
  }
  // The 32-bit word number `index` of this stream (block index / 4, word index % 4). Selected, not
  // indexed: a run-time index into the block puts it in a GPU thread's local memory.
  constexpr uint32_t word(uint64_t index) const {
    const PhiloxCounter b = block(index >> 2);
    const uint64_t k = index & 3;
    return k == 0 ? b[0] : k == 1 ? b[1] : k == 2 ? b[2] : b[3];
  }
  // Uniform in [0, 1) with 24 random bits: every value is an exact float, k * 2^-24.
  constexpr float uniform(uint64_t index) const { return uniform_of_word(word(index)); }
  // The uniform that uniform() makes of a word (for callers that use a whole block at once).
  static constexpr float uniform_of_word(uint32_t w) {
    return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
  }
  // Uniform in [0, 1) with 53 random bits, from words 2*index and 2*index+1.
  constexpr double uniform_double(uint64_t index) const {
    const PhiloxCounter b = block(index >> 1);
    const uint64_t hi = (index & 1) ? b[2] : b[0];
    const uint64_t lo = (index & 1) ? b[3] : b[1];
    return static_cast<double>(((hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
  }

 private:
  PhiloxKey key_;
  uint32_t stream_lo_;
  uint32_t stream_hi_;
};

}  // namespace nms
