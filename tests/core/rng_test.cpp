#include "nmsparse/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace nms {
namespace {

// Known-answer vectors published with Random123 (kat_vectors, lines "philox4x32 10"):
// counter[4] key[2] -> output[4].
TEST(Philox, KnownAnswerVectors) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, IsConstexpr) {
  static_assert(philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);
  SUCCEED();
}

TEST(CounterRng, KeyAndCounterMapping) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t stream = 0x0370734413198a2eull;
  const CounterRng rng(seed, stream);
  EXPECT_EQ(rng.block(0x85a308d3243f6a88ull),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  EXPECT_EQ(rng.word(4 * 5 + 2), rng.block(5)[2]);
}

TEST(CounterRng, StreamsAndSeedsDiffer) {
  std::set<uint32_t> words;
  for (uint64_t seed = 0; seed < 4; ++seed)
    for (uint64_t stream = 0; stream < 4; ++stream) words.insert(CounterRng(seed, stream).word(0));
  EXPECT_EQ(words.size(), 16u);
}

// Uniforms: mean and variance of 2^16 draws. For U(0,1) the mean has standard error
// sqrt(1/12 / 65536) = 1.13e-3; 5 standard errors = 5.6e-3. The variance 1/12 = 0.0833 has standard
// error sqrt((1/80 - 1/144) / 65536) = 2.9e-4; we allow 2e-3.
TEST(CounterRng, UniformMoments) {
  const CounterRng rng(7, 3);
  constexpr int kDraws = 1 << 16;
  double sum = 0;
  double sum_sq = 0;
  double dsum = 0;
  for (int i = 0; i < kDraws; ++i) {
    const float u = rng.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
    const double d = rng.uniform_double(i);
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    dsum += d;
  }
  const double mean = sum / kDraws;
  EXPECT_NEAR(mean, 0.5, 5.6e-3);
  EXPECT_NEAR(sum_sq / kDraws - mean * mean, 1.0 / 12, 2e-3);
  EXPECT_NEAR(dsum / kDraws, 0.5, 5.6e-3);
}

}  // namespace
}  // namespace nms
