// Helpers shared by the format tests: deterministic N:M-sparse test matrices and bitwise checks.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms::test {

inline uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}

// A dense rows x cols matrix stored with leading dimension ld (extra columns hold a sentinel that
// no function may read into its results).
struct TestMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  std::vector<float> data;
  ConstMatrixViewF view() const { return {data.data(), rows, cols, ld}; }
  MatrixViewF view() { return {data.data(), rows, cols, ld}; }
  float& at(int64_t i, int64_t j) { return data[static_cast<size_t>(i * ld + j)]; }
  float at(int64_t i, int64_t j) const { return data[static_cast<size_t>(i * ld + j)]; }
  float operator()(int64_t i, int64_t j) const { return at(i, j); }
};

struct SparseOptions {
  bool special_values = false;  // sprinkle NaN (with payloads), +-Inf, denormals
  bool negative_zeros = true;   // zeros are -0.0 half of the time
  int64_t extra_ld = 0;         // ld = cols + extra_ld
};

// Every group (along `axis`) of m gets a random number (0 .. n) of nonzeros at random positions.
// Nonzero values are small integers times 1/4 (exact), never 0. Deterministic in `seed`.
inline TestMatrix make_nm_sparse(int64_t rows, int64_t cols, NmPattern p, NmAxis axis,
                                 uint64_t seed, SparseOptions opt = {}) {
  TestMatrix t;
  t.rows = rows;
  t.cols = cols;
  t.ld = cols + opt.extra_ld;
  t.data.assign(static_cast<size_t>(std::max<int64_t>(1, rows * t.ld)), 12345.0f);  // sentinel
  const CounterRng rng(seed, 7);
  uint64_t draw = 0;
  const int64_t vrows = axis == NmAxis::kRows ? rows : cols;
  const int64_t alen = axis == NmAxis::kRows ? cols : rows;
  const float specials[] = {
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::bit_cast<float>(0x7fc00abcu),      std::bit_cast<float>(0xff800001u),
      std::bit_cast<float>(0x00000001u),      std::bit_cast<float>(0x80000003u)};
  for (int64_t v = 0; v < vrows; ++v) {
    for (int64_t g = 0; g < alen / p.m; ++g) {
      // Choose how many to keep; bias towards n and 0 so that full and empty groups are common.
      const uint32_t w = rng.word(draw++);
      int k = static_cast<int>(w % static_cast<uint32_t>(p.n + 3));
      if (k > p.n + 1) k = 0;
      if (k > p.n) k = p.n;
      uint64_t chosen = 0;
      for (int picked = 0; picked < k;) {
        const int i = static_cast<int>(rng.word(draw++) % static_cast<uint32_t>(p.m));
        if ((chosen >> i) & 1) continue;
        chosen |= uint64_t{1} << i;
        ++picked;
      }
      for (int i = 0; i < p.m; ++i) {
        const int64_t r = axis == NmAxis::kRows ? v : g * p.m + i;
        const int64_t c = axis == NmAxis::kRows ? g * p.m + i : v;
        float x = 0.0f;
        if ((chosen >> i) & 1) {
          const uint32_t u = rng.word(draw++);
          x = static_cast<float>(static_cast<int>(u % 200) - 100) * 0.25f;
          if (x == 0.0f) x = 0.75f;
          if (opt.special_values && (u >> 24) % 9 == 0) x = specials[(u >> 16) % 6];
        } else if (opt.negative_zeros && (rng.word(draw++) & 1)) {
          x = -0.0f;
        }
        t.at(r, c) = x;
      }
    }
  }
  return t;
}

// A random mask with at most n set per group along `axis` (0 .. n, biased like make_nm_sparse).
inline BitMask make_nm_mask(int64_t rows, int64_t cols, NmPattern p, NmAxis axis, uint64_t seed) {
  BitMask mask(rows, cols);
  const CounterRng rng(seed, 9);
  uint64_t draw = 0;
  const int64_t vrows = axis == NmAxis::kRows ? rows : cols;
  const int64_t alen = axis == NmAxis::kRows ? cols : rows;
  for (int64_t v = 0; v < vrows; ++v) {
    for (int64_t g = 0; g < alen / p.m; ++g) {
      int k = static_cast<int>(rng.word(draw++) % static_cast<uint32_t>(p.n + 2));
      if (k > p.n) k = p.n;
      for (int picked = 0; picked < k;) {
        const int i = static_cast<int>(rng.word(draw++) % static_cast<uint32_t>(p.m));
        const int64_t r = axis == NmAxis::kRows ? v : g * p.m + i;
        const int64_t c = axis == NmAxis::kRows ? g * p.m + i : v;
        if (mask.get(r, c)) continue;
        mask.set(r, c);
        ++picked;
      }
    }
  }
  return mask;
}

// Dense matrix with every entry a nonzero small integer / 4 (for masked compression).
inline TestMatrix make_dense(int64_t rows, int64_t cols, uint64_t seed, int64_t extra_ld = 0) {
  TestMatrix t;
  t.rows = rows;
  t.cols = cols;
  t.ld = cols + extra_ld;
  t.data.assign(static_cast<size_t>(std::max<int64_t>(1, rows * t.ld)), 12345.0f);
  const CounterRng rng(seed, 11);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float x = static_cast<float>(
                    static_cast<int>(rng.word(static_cast<uint64_t>(i * cols + j)) % 41) - 20) *
                0.25f;
      if (x == 0.0f) x = -0.0f;  // some kept entries are -0.0 and must come back +0.0
      t.at(i, j) = x;
    }
  }
  return t;
}

inline std::vector<uint8_t> bytes_of(const AlignedBuffer<uint8_t>& b) {
  return {b.begin(), b.end()};
}
inline std::vector<uint32_t> bits_of(const AlignedBuffer<float>& b) {
  std::vector<uint32_t> out;
  for (float x : b) out.push_back(bits_of(x));
  return out;
}

// Two compressed matrices are identical field by field, values bitwise.
inline void expect_same_compressed(const CompressedNm& a, const CompressedNm& b,
                                   const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(a.pattern, b.pattern) << what;
  EXPECT_EQ(a.axis, b.axis) << what;
  EXPECT_EQ(bits_of(a.values), bits_of(b.values)) << what;
  EXPECT_EQ(bytes_of(a.indices), bytes_of(b.indices)) << what;
}

// `got` (rows x cols) equals `expected` bitwise except that -0.0 in `expected` must read +0.0.
template <class A, class B>
void expect_bitwise_canonical(const A& got, const B& expected, int64_t rows, int64_t cols,
                              const std::string& what) {
  int reported = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float e = expected(i, j);
      if (e == 0.0f) e = 0.0f;
      if (bits_of(got(i, j)) != bits_of(e) && reported++ < 5) {
        ADD_FAILURE() << what << " at (" << i << ", " << j << "): got " << got(i, j) << " (0x"
                      << std::hex << bits_of(got(i, j)) << "), expected " << e << " (0x"
                      << bits_of(e) << std::dec << ")";
      }
    }
  }
}

// Runs `fn` and expects an nms::Error whose message contains every fragment.
template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no nms::Error thrown; expected one mentioning '" << fragments.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(msg.find(f), std::string::npos) << "message '" << msg << "' lacks '" << f << "'";
    }
  }
}

}  // namespace nms::test
