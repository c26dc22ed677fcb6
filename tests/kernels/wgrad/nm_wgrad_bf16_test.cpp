// nm_wgrad_bf16 (dW = D̂ᵀ · X̂ with dY pruned N:M along tokens, both rounded to bf16, fp32
// accumulation) against a double-precision reference on the rounded inputs, at the AVX-512 BF16
// kernel (where the CPU has it) and the scalar path, around every tile edge, with the decay term,
// on 1 and 2 threads, and its errors.
//
// Tolerance: every product d̂ x̂ is exact in fp32 (two 8-bit significands), so dW(o, i) is the sum
// of the start term and s = T / m · n (+ 1 for an odd slot count's padding) exact terms, each
// addition rounding once: |dW − ref| <= γ_{s+1} (|start| + Σ |d̂ x̂|), γ_k = k u / (1 − k u),
// u = 2^-24 (Higham §3.1, any order), plus < 2^-126 per addition for flushed denormal sums (the
// data stays far above it). A wrong token, value or pair moves an element by about one term.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "grad/prune_lanes.h"
#include "kernels/nm_gemm_bf16_layout.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_wgrad_bf16.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

struct Case {
  int64_t tokens, in, out;
  NmPattern pattern;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "T " << c.tokens << ", " << c.in << " -> " << c.out << ", " << c.pattern.to_string();
  return s.str();
}

double rounded(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

// The decay of a case: W [out, in] with row stride in + 3, keep bytes with stride in + 5 (a third
// of them 0: dropped), λ. Two of the dropped starts are special: a denormal product (flushed to
// -0 by both paths) and -0 itself.
struct Decay {
  Matrix wbuf;
  std::vector<uint8_t> keep;
  NmWgradDecay view;
};

Decay make_decay(const Case& c, uint64_t seed) {
  Decay d{testing::random_matrix(c.out, c.in + 3, seed), {}, {}};
  const int64_t keep_ld = c.in + 5;
  d.keep.resize(static_cast<size_t>(c.out * keep_ld));
  for (size_t k = 0; k < d.keep.size(); ++k) d.keep[k] = static_cast<uint8_t>((k * 7 + k / 3) % 3);
  if (c.out > 0 && c.in > 1) {
    d.keep[0] = d.keep[1] = 0;
    d.wbuf(0, 0) = -0x1p-120f;  // λ · W = -2^-122: denormal
    d.wbuf(0, 1) = -0.0f;
  }
  d.view = NmWgradDecay{ConstMatrixViewF(d.wbuf.data(), c.out, c.in, c.in + 3), d.keep.data(),
                        keep_ld, 0.0625f};
  return d;
}

float start_of(const NmWgradDecay* decay, int64_t o, int64_t i) {
  if (decay == nullptr || decay->keep[o * decay->keep_ld + i] != 0) return 0.0f;
  const float v = decay->lambda * decay->w(o, i);
  return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v;
}

// Runs the case at the active level and the scalar path: each within the bound of the double
// reference, the padding columns of dw untouched, the two equal bit for bit. Returns the active
// level's dW (row stride in + 2).
std::vector<float> check_case(const Case& c, uint64_t seed, bool with_decay) {
  const Matrix d = testing::random_nm(c.tokens, c.out, c.pattern, NmAxis::kCols, seed);
  const CompressedNm dy = nm_compress(d.view(), c.pattern, NmAxis::kCols);
  const Matrix xbuf = testing::random_matrix(c.tokens, c.in + 4, seed + 1);
  const ConstMatrixViewF x(xbuf.data(), c.tokens, c.in, c.in + 4);
  const Decay decay = make_decay(c, seed + 2);
  const NmWgradDecay* dec = with_decay ? &decay.view : nullptr;
  const int64_t ld = c.in + 2;
  const int64_t slots = c.tokens / c.pattern.m * c.pattern.n + 2;
  const double gamma = slots * 0x1p-24 / (1.0 - slots * 0x1p-24);
  std::vector<float> active;
  for (const bool scalar : {false, true}) {
    std::vector<float> dw(static_cast<size_t>(c.out * ld), -7.0f);
    {
      const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
      nm_wgrad_bf16(dy, x, MatrixViewF(dw.data(), c.out, c.in, ld), nullptr, dec);
    }
    int bad = 0;
    for (int64_t o = 0; o < c.out && bad < 3; ++o) {
      for (int64_t i = 0; i < c.in && bad < 3; ++i) {
        const float start = start_of(dec, o, i);
        double ref = start, mag = std::fabs(start);
        for (int64_t t = 0; t < c.tokens; ++t) {
          const double term = rounded(d(t, o)) * rounded(x(t, i));
          ref += term;
          mag += std::fabs(term);
        }
        const float got = dw[o * ld + i];
        if (std::fabs(got - ref) > gamma * mag + slots * 0x1p-126) {
          ADD_FAILURE() << describe(c) << (scalar ? " scalar" : " active") << " dW(" << o << ", "
                        << i << ") = " << got << ", reference " << ref;
          ++bad;
        }
        if (c.tokens == 0 && std::memcmp(&got, &start, sizeof got) != 0) {
          ADD_FAILURE() << describe(c) << " dW(" << o << ", " << i << ") = " << got
                        << ", the start term is " << start;
          ++bad;
        }
      }
      for (int64_t i = c.in; i < ld; ++i) EXPECT_EQ(dw[o * ld + i], -7.0f) << describe(c);
    }
    if (!scalar) {
      active = dw;
    } else if (nm_gemm_bf16_kernel_active()) {
      EXPECT_EQ(dw, active) << describe(c) << ": the kernel and the scalar path differ";
    }
  }
  return active;
}

TEST(NmWgradBf16, PatternsAndTileEdges) {
  // In features around the kernel's 8-wide tile and its 256-feature work items, out features
  // around the 32-row block and its 16-row halves, T with and without a partial last chunk of 32
  // tokens; patterns with even and odd slot counts per chunk.
  const NmPattern patterns[] = {{1, 2},  {2, 4},   {1, 4},  {4, 8}, {3, 8},
                                {8, 16}, {16, 32}, {1, 32}, {3, 32}};
  uint64_t seed = 1;
  for (const NmPattern p : patterns) {
    for (const int64_t tokens : {int64_t{32}, int64_t{96} + p.m, int64_t{p.m}}) {
      for (const int64_t out : {1, 15, 16, 17, 33, 67}) {
        check_case({tokens, 9, out, p}, seed, seed % 2 == 0);
        ++seed;
      }
    }
    for (const int64_t in : {1, 7, 8, 19, 259}) {
      check_case({64 + p.m, in, 35, p}, seed, seed % 2 == 1);
      ++seed;
    }
  }
}

TEST(NmWgradBf16, DecayAndDepthBlocks) {
  // The decay term as each chain's start (denormal and -0 starts included), past the kernel's K
  // block of 64 chunks (2048 tokens: dW stored and reloaded in the transposed form), and T = 0
  // (dW = the start term).
  for (const bool with_decay : {false, true}) {
    check_case({2048 + 96, 21, 40, {2, 4}}, 5, with_decay);
    check_case({64, 130, 7, {2, 4}}, 6, with_decay);
    check_case({0, 33, 5, {2, 4}}, 7, with_decay);
  }
}

TEST(NmWgradBf16, StreamedLinesOfALargeDw) {
  // dW of at least 8 MB, 64-byte aligned with ld % 16 == 0 and T within one K block: the kernel
  // writes whole lines with streaming stores (the last work item holds 16 in features); the same
  // bits as the scalar path, with the decay, on 1 and 2 threads.
  const Case c{64, 2064, 1024, {2, 4}};
  const Matrix d = testing::random_nm(c.tokens, c.out, c.pattern, NmAxis::kCols, 3);
  const CompressedNm dy = nm_compress(d.view(), c.pattern, NmAxis::kCols);
  const Matrix x = testing::random_matrix(c.tokens, c.in, 4);
  const Decay decay = make_decay(c, 5);
  Matrix want(c.out, c.in);
  {
    const ScopedIsa isa(Isa::kScalar);
    nm_wgrad_bf16(dy, x.view(), want.view(), nullptr, &decay.view);
  }
  for (const int threads : {1, 2}) {
    const ScopedNumThreads t(threads);
    Matrix got(c.out, c.in);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(got.data()) % 64, 0u);
    nm_wgrad_bf16(dy, x.view(), got.view(), nullptr, &decay.view);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0) << threads;
  }
}

TEST(NmWgradBf16, ThreadsDoNotChangeBits) {
  const Case c{200, 600, 70, {2, 4}};
  std::vector<float> one, two;
  {
    const ScopedNumThreads threads(1);
    one = check_case(c, 21, true);
  }
  {
    const ScopedNumThreads threads(2);
    two = check_case(c, 21, true);
  }
  EXPECT_EQ(one, two);
}

TEST(NmWgradBf16, PrunedEqualsPruneThenWgrad) {
  // The fused route (2:4 MVUE, T % 16 == 0, out % 32 == 0 at the AVX-512 BF16 level: MVUE writes
  // the kernel's operand) and the compressed one (the rest) against pruning then nm_wgrad_bf16:
  // the same bits, with and without the decay, on 1-3 threads (row parts of 512-column strips),
  // the workspace reused.
  struct Shape {
    int64_t tokens, in, out;
    NmPattern pattern;
  };
  const Shape shapes[] = {
      {96, 40, 64, {2, 4}},   // fused, whole 32-token chunks
      {80, 40, 96, {2, 4}},   // fused, a last chunk of 16 tokens
      {64, 24, 576, {2, 4}},  // fused, a full strip and one of 64 columns
      {64, 40, 40, {2, 4}},   // out % 32 != 0: compressed
      {52, 40, 64, {2, 4}},   // T % 16 != 0: compressed
      {64, 40, 64, {4, 8}},   // 4:8: compressed
  };
  uint64_t seed = 300;
  for (const Shape& sh : shapes) {
    const Matrix dy = testing::random_matrix(sh.tokens, sh.out, seed++);
    const Matrix x = testing::random_matrix(sh.tokens, sh.in, seed++);
    const Case c{sh.tokens, sh.in, sh.out, sh.pattern};
    const Decay decay = make_decay(c, seed++);
    const GradPruneOptions prune{GradMethod::kMvue, sh.pattern, NmAxis::kCols, seed++, 17};
    for (const bool with_decay : {false, true}) {
      const NmWgradDecay* d = with_decay ? &decay.view : nullptr;
      for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE(describe(c) + " threads " + std::to_string(threads) +
                     (with_decay ? " decay" : ""));
        const ScopedNumThreads t(threads);
        Matrix want(sh.out, sh.in), got(sh.out, sh.in);
        nm_wgrad_bf16(grad_prune_compressed(dy.view(), prune), x.view(), want.view(), nullptr, d);
        NmWgradBf16Workspace ws;
        for (int round = 0; round < 2; ++round) {  // the second call reuses the workspace
          nm_wgrad_bf16_pruned(dy.view(), prune, x.view(), got.view(), &ws, d);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0);
        }
      }
    }
  }
}

TEST(NmWgradBf16, FusedPairFormEqualsThePackOfTheCompressedDy) {
  if (!nm_gemm_bf16_kernel_active()) GTEST_SKIP() << "the fused route needs AVX512_BF16";
  for (const int64_t tokens : {int64_t{208}, int64_t{224}}) {  // a last chunk of 16, or none
    for (const int threads : {1, 2}) {
      const ScopedNumThreads t(threads);
      Matrix dy = testing::random_integer_matrix(tokens, 576, 2, 41);
      // Groups of at most two nonzeros keep their values as they are: denormals among them must
      // come out as signed zeros (vcvtneps2bf16's reading), as the pack writes them.
      for (int64_t g = 0; g < tokens / 4; g += 3) {
        for (int64_t i = 0; i < 4; ++i) dy(4 * g + i, g % 576) = 0.0f;
        dy(4 * g + g % 4, g % 576) = g % 2 == 0 ? 0x1p-130f : -0x1.8p-127f;
        dy(4 * g + (g + 1) % 4, g % 576) = 0.75f;
      }
      const GradPruneOptions prune{GradMethod::kMvue, {2, 4}, NmAxis::kCols, 5, 6};
      ASSERT_TRUE(detail::grad_prune_lanes24_applies(dy.view(), prune));
      const NmGemmBf16Operand want = nm_gemm_bf16_pack(grad_prune_compressed(dy.view(), prune));
      const detail::NmGemmBf16Layout lay(576, tokens, 2, 4);
      AlignedBuffer<uint16_t> values(lay.total()), index(lay.total());  // zeroed
      detail::grad_prune_pairs24_bf16(dy.view(), prune, values.data(), index.data());
      ASSERT_EQ(want.values.size(), lay.total());
      EXPECT_EQ(std::memcmp(values.data(), want.values.data(), 2 * lay.total()), 0) << tokens;
      EXPECT_EQ(std::memcmp(index.data(), want.index.data(), 2 * lay.total()), 0) << tokens;
    }
  }
}

TEST(NmWgradBf16, Errors) {
  const Matrix d = testing::random_nm(16, 10, {2, 4}, NmAxis::kCols, 9);
  const CompressedNm dy = nm_compress(d.view(), {2, 4}, NmAxis::kCols);
  const Matrix x = testing::random_matrix(16, 20, 3);
  Matrix dw(10, 20);
  Matrix dw_bad(10, 21);
  testing::expect_error([&] { nm_wgrad_bf16(dy, x.view(), dw_bad.view()); },
                        "expected [dY cols, x cols] = 10 x 20");
  const Matrix x_bad = testing::random_matrix(12, 20, 3);
  testing::expect_error([&] { nm_wgrad_bf16(dy, x_bad.view(), dw.view()); }, "x has 12 rows");
  const Matrix d8 = testing::random_nm(16, 8, {2, 4}, NmAxis::kRows, 9);
  const CompressedNm rows = nm_compress(d8.view(), {2, 4}, NmAxis::kRows);
  Matrix dw8(8, 20);
  EXPECT_NE(nm_wgrad_bf16_check(rows, x.view(), dw8.view()).find("axis"), std::string::npos)
      << nm_wgrad_bf16_check(rows, x.view(), dw8.view());
  const Matrix d6 = testing::random_nm(12, 10, {2, 6}, NmAxis::kCols, 9);
  const CompressedNm dy6 = nm_compress(d6.view(), {2, 6}, NmAxis::kCols);
  const Matrix x6 = testing::random_matrix(12, 20, 3);
  testing::expect_error([&] { nm_wgrad_bf16(dy6, x6.view(), dw.view()); },
                        "pattern 2:6 is not supported (m must divide 32");
  const GradPruneOptions along_rows{GradMethod::kMvue, {2, 4}, NmAxis::kRows, 1, 2};
  testing::expect_error([&] { nm_wgrad_bf16_pruned(d.view(), along_rows, x.view(), dw.view()); },
                        "pruned along tokens");
  EXPECT_EQ(nm_wgrad_bf16_check(dy, x.view(), dw.view()), "");
}

}  // namespace
}  // namespace nms
