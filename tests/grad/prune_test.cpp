// grad_prune: optimised paths against the plain reference (bit for bit) on edge sizes, the
// compressed output against nm_compress, thread-count independence, invariants and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "grad/prune_reference.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

bool same_bits(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

bool same_compressed(const CompressedNm& a, const CompressedNm& b) {
  return a.rows == b.rows && a.cols == b.cols && a.pattern == b.pattern && a.axis == b.axis &&
         a.values.size() == b.values.size() && a.indices.size() == b.indices.size() &&
         std::memcmp(a.values.data(), b.values.data(),
                     sizeof(float) * static_cast<size_t>(a.values.size())) == 0 &&
         (a.indices.size() == 0 ||  // m == 1 (1:1): no index bytes, data() may be null
          std::memcmp(a.indices.data(), b.indices.data(), static_cast<size_t>(a.indices.size())) ==
              0);
}

// Test inputs: 0 uniform [-1, 1); 1 integers in [-2, 2] (ties, zeros, all-zero groups);
// 2 uniform with every third element zero and a dominant element every 7th.
Matrix make_input(int kind, int64_t rows, int64_t cols, uint64_t seed) {
  if (kind == 1) return testing::random_integer_matrix(rows, cols, 2, seed);
  Matrix a = testing::random_matrix(rows, cols, seed);
  if (kind == 2) {
    for (int64_t k = 0; k < a.size(); ++k) {
      if (k % 3 == 0) a.data()[k] = 0.0f;
      if (k % 7 == 0) a.data()[k] *= 50.0f;
    }
  }
  return a;
}

// Every group along `axis` of `x` has at most n nonzeros; kept values have their input's sign and
// at least its magnitude (g / p with p <= 1); zero inputs stay +0.0.
void check_invariants(const Matrix& g, const Matrix& x, const GradPruneOptions& o) {
  const int m = o.pattern.m;
  const bool rows_axis = o.axis == NmAxis::kRows;
  const int64_t outer = rows_axis ? g.rows() : g.cols();
  const int64_t inner = (rows_axis ? g.cols() : g.rows()) / m;
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t k = 0; k < inner; ++k) {
      int nnz = 0;
      for (int i = 0; i < m; ++i) {
        const int64_t r = rows_axis ? a : k * m + i;
        const int64_t c = rows_axis ? k * m + i : a;
        const float gv = g(r, c);
        const float xv = x(r, c);
        if (xv == 0.0f) {
          ASSERT_FALSE(std::signbit(xv)) << "-0.0 at " << r << "," << c;
          continue;
        }
        ++nnz;
        ASSERT_NE(gv, 0.0f) << r << "," << c;
        ASSERT_EQ(std::signbit(gv), std::signbit(xv)) << r << "," << c;
        ASSERT_GE(std::fabs(xv), std::fabs(gv) * (1.0f - 1e-6f)) << r << "," << c;
      }
      ASSERT_LE(nnz, o.pattern.n) << "group " << a << "/" << k;
    }
  }
}

struct Config {
  GradMethod method;
  NmPattern pattern;
};

const Config kConfigs[] = {
    {GradMethod::kMvue, {1, 2}},         {GradMethod::kMvue, {2, 4}},
    {GradMethod::kMvue, {1, 4}},         {GradMethod::kMvue, {4, 8}},
    {GradMethod::kMvue, {8, 16}},        {GradMethod::kMvue, {3, 5}},
    {GradMethod::kMvue, {16, 64}},       {GradMethod::kMvue, {1, 1}},
    {GradMethod::kMvueApprox24, {2, 4}}, {GradMethod::kTopN, {2, 4}},
    {GradMethod::kTopN, {4, 8}},
};

// Every ISA level this CPU runs (isa.h): 2:4 MVUE has a scalar, an SSE2 (avx2) and an AVX-512
// path, each bit-identical to the reference.
std::vector<Isa> isa_levels() {
  std::vector<Isa> levels;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa <= isa_supported()) levels.push_back(isa);
  }
  return levels;
}

TEST(GradPrune, MatchesReferenceOnEdgeSizes) {
  // Lengths around the 16-group vector step (64 elements at 2:4) and the 64-group Philox step,
  // odd group counts (the 4-group Philox alignment shifts from row to row; the AVX-512 row kernel
  // needs a multiple of 4 groups per row), group-row counts around the 8 per index word of the
  // AVX-512 column kernel, widths that are and are not multiples of 4 and 16, and tiny shapes.
  const int64_t lens[] = {1, 3, 4, 8, 9, 15, 16, 17, 33, 68, 83};
  const int64_t acrosses[] = {1, 5, 16, 70, 84};
  for (const Config& cfg : kConfigs) {
    // MVUE has a path per level (2:4: scalar, SSE2 and AVX2 at the avx2 level, AVX-512; other
    // patterns: scalar, and AVX2 and AVX-512 for groups along columns); the other methods one.
    const bool is24 = cfg.method == GradMethod::kMvue && (cfg.pattern == NmPattern{2, 4});
    const bool dispatched = cfg.method == GradMethod::kMvue;
    const std::vector<Isa> levels = dispatched ? isa_levels() : std::vector<Isa>{isa_active()};
    for (Isa isa : levels) {
      ScopedIsa level(isa);
      for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
        for (int kind = 0; kind < 3; ++kind) {
          for (int64_t groups : lens) {
            for (int64_t across : acrosses) {
              if (!is24 && groups > 17 && across > 16) continue;  // fewer large sizes off 2:4
              const int m = cfg.pattern.m;
              const int64_t rows = axis == NmAxis::kRows ? across : groups * m;
              const int64_t cols = axis == NmAxis::kRows ? groups * m : across;
              GradPruneOptions o{cfg.method, cfg.pattern, axis, 7 + static_cast<uint64_t>(kind),
                                 tensor_stream_id("layer")};
              const Matrix g = make_input(kind, rows, cols, static_cast<uint64_t>(rows * cols));
              const Matrix ref = detail::grad_prune_reference(g.view(), o);
              const Matrix got = grad_prune(g.view(), o);
              SCOPED_TRACE(std::string(grad_method_name(cfg.method)) + " " +
                           cfg.pattern.to_string() + " " + std::string(axis_name(axis)) + " " +
                           std::to_string(rows) + "x" + std::to_string(cols) + " kind " +
                           std::to_string(kind) + " isa " + std::string(isa_name(isa)));
              ASSERT_TRUE(same_bits(ref, got));
              check_invariants(g, got, o);
              const CompressedNm c = grad_prune_compressed(g.view(), o);
              ASSERT_NO_THROW(nm_validate(c));
              ASSERT_TRUE(same_compressed(c, nm_compress(got.view(), cfg.pattern, axis)));
            }
          }
        }
      }
    }
  }
}

TEST(GradPrune, ColumnKernelsAcrossStrips) {
  // MVUE along columns over several column strips of the vector kernels (512 columns at AVX2 and
  // AVX-512) with a scalar tail of 12 columns; at 2:4, 9 tiles of 8 group rows (the last partial),
  // for a small key and for one with every bit of seed and stream set.
  const Matrix g = make_input(0, 8 * 34, 1100, 21);
  for (const GradPruneOptions& o :
       {GradPruneOptions{GradMethod::kMvue, {2, 4}, NmAxis::kCols, 5, 3},
        GradPruneOptions{GradMethod::kMvue, {2, 4}, NmAxis::kCols, ~uint64_t{0}, ~uint64_t{0}},
        GradPruneOptions{GradMethod::kMvue, {4, 8}, NmAxis::kCols, 5, 3},
        GradPruneOptions{GradMethod::kMvue, {1, 4}, NmAxis::kCols, 6, 4}}) {
    SCOPED_TRACE(o.pattern.to_string());
    const Matrix ref = detail::grad_prune_reference(g.view(), o);
    for (Isa isa : isa_levels()) {
      ScopedIsa level(isa);
      SCOPED_TRACE(isa_name(isa));
      ASSERT_TRUE(same_bits(ref, grad_prune(g.view(), o)));
      const CompressedNm c = grad_prune_compressed(g.view(), o);
      ASSERT_TRUE(same_compressed(c, nm_compress(ref.view(), o.pattern, o.axis)));
    }
  }
}

TEST(GradPrune, ColumnKernelsEmitEveryIndexWidth) {
  // The compressed emission of the vector column kernels gathers a group's index fields in one
  // 128-bit word when n · bits <= 120 (fields at every bit offset within a byte: 3:7's 9 bits,
  // 7:8's 21, 5:12's 20; 24:32's 120 at the limit) and ORs them field by field above it (25:32's
  // 125, 32:64's 192): both must give nm_compress's bytes, across a 512-column strip and its tail
  // (the vector kernels need a multiple of 4 columns). 1:2, 1:3 and 1:4 hold 16 group rows per
  // column and write them at once: 38 group rows make two runs of 16 and a tail of 6.
  const NmPattern patterns[] = {{3, 7},   {7, 8},   {5, 12}, {1, 8}, {24, 32},
                                {25, 32}, {32, 64}, {1, 2},  {1, 3}, {1, 4}};
  uint64_t seed = 40;
  for (const NmPattern p : patterns) {
    SCOPED_TRACE(p.to_string());
    const Matrix g = make_input(0, p.m * (p.n == 1 && p.m <= 4 ? 38 : 6), 532, seed++);
    const GradPruneOptions o{GradMethod::kMvue, p, NmAxis::kCols, seed, 2};
    const Matrix ref = detail::grad_prune_reference(g.view(), o);
    for (Isa isa : isa_levels()) {
      ScopedIsa level(isa);
      SCOPED_TRACE(isa_name(isa));
      const CompressedNm c = grad_prune_compressed(g.view(), o);
      ASSERT_TRUE(same_compressed(c, nm_compress(ref.view(), o.pattern, o.axis)));
    }
  }
}

TEST(GradPrune, SameResultForOneAndTwoThreads) {
  for (const Config& cfg : kConfigs) {
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      const Matrix g = make_input(0, 320, 320, 11);
      const GradPruneOptions o{cfg.method, cfg.pattern, axis, 99, 5};
      Matrix one;
      Matrix two;
      CompressedNm c1;
      CompressedNm c2;
      {
        ScopedNumThreads t(1);
        one = grad_prune(g.view(), o);
        c1 = grad_prune_compressed(g.view(), o);
      }
      {
        ScopedNumThreads t(2);
        two = grad_prune(g.view(), o);
        c2 = grad_prune_compressed(g.view(), o);
      }
      EXPECT_TRUE(same_bits(one, two)) << cfg.pattern.to_string();
      EXPECT_TRUE(same_compressed(c1, c2)) << cfg.pattern.to_string();
    }
  }
}

TEST(GradPrune, ColumnKernelSplitsRowsForThreads) {
  // Fewer 512-column strips than threads: the AVX-512 2:4 column kernel also splits the group
  // rows (8-row units). 67 group rows (not a multiple of 8), a full strip and one of 68 columns
  // (4 blocks and a scalar tail of 4), 2 and 3 threads; and a single narrow strip (192 columns).
  for (const int64_t cols : {int64_t{580}, int64_t{192}}) {
    const Matrix g = make_input(2, 4 * 67, cols, 31);
    const GradPruneOptions o{GradMethod::kMvue, {2, 4}, NmAxis::kCols, 12, 34};
    const Matrix ref = detail::grad_prune_reference(g.view(), o);
    const CompressedNm ref_c = nm_compress(ref.view(), o.pattern, o.axis);
    for (int threads : {2, 3}) {
      SCOPED_TRACE(std::to_string(cols) + " columns, " + std::to_string(threads) + " threads");
      ScopedNumThreads t(threads);
      ASSERT_TRUE(same_bits(ref, grad_prune(g.view(), o)));
      ASSERT_TRUE(same_compressed(ref_c, grad_prune_compressed(g.view(), o)));
    }
  }
}

TEST(GradPrune, CompressedIntoReusesBuffers) {
  const Matrix g = make_input(0, 64, 128, 3);
  GradPruneOptions o;
  CompressedNm c;
  grad_prune_compressed_into(g.view(), o, c);
  const float* values = c.values.data();
  o.seed = 1;
  grad_prune_compressed_into(g.view(), o, c);  // stale index bits must be cleared
  EXPECT_EQ(values, c.values.data());
  EXPECT_TRUE(same_compressed(c, nm_compress(grad_prune(g.view(), o).view(), o.pattern)));
}

TEST(GradPrune, IdenticalRowsGetIndependentDraws) {
  // 256 identical rows of one 2:4 group (1, 2, 3, 4): every row draws on its own; all six pairs of
  // the design have probability >= 1/20 here, so 256 equal rows would be a bug.
  Matrix g(256, 4);
  for (int64_t r = 0; r < 256; ++r)
    for (int i = 0; i < 4; ++i) g(r, i) = static_cast<float>(i + 1);
  for (NmAxis axis : {NmAxis::kRows}) {
    const Matrix x = grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, axis, 1, 2});
    int differ = 0;
    for (int64_t r = 1; r < 256; ++r) differ += std::memcmp(x.data(), x.data() + 4 * r, 16) != 0;
    EXPECT_GT(differ, 100);
  }
  // Another seed or stream gives another draw.
  const Matrix a = grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kRows, 1, 2});
  const Matrix b = grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kRows, 1, 3});
  const Matrix c = grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kRows, 2, 2});
  EXPECT_FALSE(same_bits(a, b));
  EXPECT_FALSE(same_bits(a, c));
}

TEST(GradPrune, ZeroGroupsStayZeroAndSmallGroupsExact) {
  Matrix g(2, 8);
  g(0, 4) = -0.0f;
  g(1, 1) = 3.0f;
  g(1, 6) = -2.0f;
  for (GradMethod method : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
    const Matrix x = grad_prune(g.view(), {method, {2, 4}, NmAxis::kRows, 5, 5});
    for (int64_t k = 0; k < 16; ++k) {
      const float expect = g.data()[k] == 0.0f ? 0.0f : g.data()[k];
      EXPECT_EQ(std::memcmp(&x.data()[k], &expect, 4), 0) << k;
    }
  }
}

TEST(GradPrune, StreamIdIsFnv1a64) {
  EXPECT_EQ(tensor_stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(tensor_stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(tensor_stream_id("foobar"), 0x85944171f73967e8ull);
}

TEST(GradPrune, MethodNames) {
  for (GradMethod m : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
    EXPECT_EQ(grad_method_from_name(grad_method_name(m)), m);
  }
  EXPECT_FALSE(grad_method_from_name("MVUE").has_value());
}

TEST(GradPrune, BadInputErrors) {
  for (Isa isa : isa_levels()) {
    ScopedIsa level(isa);
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity()}) {
        Matrix g = make_input(0, 8, 64, 1);
        g(2, 37) = bad;
        const GradPruneOptions o{GradMethod::kMvue, {2, 4}, axis, 0, 0};
        testing::expect_error([&] { grad_prune(g.view(), o); }, "at (row 2, col 37)");
        testing::expect_error([&] { grad_prune_compressed(g.view(), o); }, "at (row 2, col 37)");
        const GradPruneOptions o48{GradMethod::kMvue, {4, 8}, axis, 0, 0};
        testing::expect_error([&] { grad_prune(g.view(), o48); }, "non-finite gradient");
      }
    }
  }
  const Matrix g = make_input(0, 6, 10, 1);
  testing::expect_error(
      [&] {
        grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kRows});
      },
      "does not divide");
  testing::expect_error(
      [&] {
        grad_prune(g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kCols});
      },
      "does not divide");
  testing::expect_error(
      [&] {
        grad_prune(g.view(), {GradMethod::kMvue, {5, 2}, NmAxis::kRows});
      },
      "5");
  const Matrix h = make_input(0, 8, 16, 1);
  testing::expect_error(
      [&] {
        grad_prune(h.view(), {GradMethod::kMvueApprox24, {4, 8}, NmAxis::kRows});
      },
      "2:4 only");
  Matrix wrong(8, 12);
  testing::expect_error([&] { grad_prune_into(h.view(), {}, wrong.view()); }, "output is 8 x 12");
  for (Isa isa : isa_levels()) {  // an overflowing group among 64 (a vector kernel's step)
    ScopedIsa level(isa);
    Matrix huge(64, 64);
    for (int i = 0; i < 4; ++i) huge(33, 20 + i) = 3e38f;
    testing::expect_error([&] { grad_prune(huge.view(), {}); }, "(row 33, col 20)");
    GradPruneOptions cols;
    cols.axis = NmAxis::kCols;
    for (int i = 0; i < 4; ++i) huge(40 + i, 7) = 3e38f;
    testing::expect_error([&] { grad_prune(huge.view(), cols); }, "sum past the fp32 range");
  }
}

}  // namespace
}  // namespace nms
