// nm_gemm_bf16 (Y = X · Aᵀ with bf16 X and A, fp32 accumulation) against a double-precision
// reference on the bf16 inputs, at the AVX-512 BF16 kernel (where the CPU has it) and the scalar
// path, edge sizes around every tile edge, strides, threads, and errors.
//
// Tolerance: with x̂, ŵ the bf16 inputs, every product x̂ ŵ is exact in fp32 (two 8-bit
// significands), so an output is a sum of s exact terms (s = the row's slots, padding included:
// K / m · n, plus 1 when a chunk's slot count is odd) in fp32, each addition rounding once:
// |y − Σ x̂ ŵ| <= γ_s Σ |x̂ ŵ| with γ_s = s u / (1 − s u), u = 2^-24 (Higham §3.1, any order), plus
// what flushing denormal sums can lose (< 2^-126 per addition; the data here stays far above it).
// A wrong column, value or pair moves an output by about one term, orders of magnitude above the
// bound.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm_case.h"
#include "kernels/same_operand.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/kernels/transpose.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

struct Bf16Matrix {
  int64_t rows, cols, ld;
  std::vector<uint16_t> bits;
  MatrixView<const uint16_t> view() const { return {bits.data(), rows, cols, ld}; }
};

// Rounds `m` to bf16 with row stride ld (the padding columns hold NaN: never read).
Bf16Matrix to_bf16(const Matrix& m, int64_t ld) {
  Bf16Matrix b{m.rows(), m.cols(), ld, std::vector<uint16_t>(m.rows() * ld, 0x7fc0)};
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) b.bits[i * ld + j] = f32_to_bf16(m(i, j));
  }
  return b;
}

using Case = testing::GemmCase;
using testing::describe;

// Runs the case at the active level and at the scalar path; each result within the bound of the
// double reference, and the two equal bit for bit. Returns the active level's result.
std::vector<float> check_case(const Case& c, uint64_t seed) {
  const bool fwd = c.axis == NmAxis::kRows;
  const Matrix d = fwd ? testing::random_nm(c.rows, c.depth, c.pattern, c.axis, seed)
                       : testing::random_nm(c.depth, c.rows, c.pattern, c.axis, seed);
  const NmGemmBf16Operand a = nm_gemm_bf16_pack(nm_compress(d.view(), c.pattern, c.axis));
  const Bf16Matrix x = to_bf16(testing::random_matrix(c.tokens, c.depth, seed + 1), c.depth + 5);
  const int64_t ldy = c.rows + 3;
  const int64_t slots = c.depth / c.pattern.m * c.pattern.n + 1;
  const double gamma = slots * 0x1p-24 / (1.0 - slots * 0x1p-24);
  std::vector<double> ref(c.tokens * c.rows), mag(c.tokens * c.rows);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t k = 0; k < c.depth; ++k) {
        const double w = bf16_to_f32(f32_to_bf16(fwd ? d(r, k) : d(k, r)));
        const double term = static_cast<double>(bf16_to_f32(x.bits[t * x.ld + k])) * w;
        sum += term;
        abs_sum += std::fabs(term);
      }
      ref[t * c.rows + r] = sum;
      mag[t * c.rows + r] = abs_sum;
    }
  }
  std::vector<float> active;
  for (const bool scalar : {false, true}) {
    std::vector<float> y(c.tokens * ldy, -7.0f);
    {
      const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
      nm_gemm_bf16(x.view(), a, MatrixViewF(y.data(), c.tokens, c.rows, ldy));
    }
    int bad = 0;
    for (int64_t t = 0; t < c.tokens && bad < 3; ++t) {
      for (int64_t r = 0; r < c.rows && bad < 3; ++r) {
        const double err = std::fabs(y[t * ldy + r] - ref[t * c.rows + r]);
        if (err > gamma * mag[t * c.rows + r] + slots * 0x1p-126) {
          ADD_FAILURE() << describe(c) << (scalar ? " scalar" : " active") << " y(" << t << ", "
                        << r << ") = " << y[t * ldy + r] << ", reference " << ref[t * c.rows + r];
          ++bad;
        }
      }
      for (int64_t r = c.rows; r < ldy; ++r) EXPECT_EQ(y[t * ldy + r], -7.0f) << describe(c);
    }
    if (!scalar) {
      active = y;
    } else if (nm_gemm_bf16_kernel_active()) {
      // vdpbf16ps is specified as two rounded fp32 additions per lane, the odd word's product
      // first (Intel SDM), which the scalar path reproduces: the same bits (Zen 4 matches).
      EXPECT_EQ(y, active) << describe(c) << ": the kernel and the scalar path differ";
    }
  }
  return active;
}

TEST(NmGemmBf16, PatternsAndTileEdges) {
  // Tokens around the 8-token tile, rows around the 32-row block and its two 16-row halves,
  // depth with and without a partial last chunk; patterns with even and odd slot counts per
  // chunk (1:32 and 3:32: one and three slots, a padded pair).
  const NmPattern patterns[] = {{1, 2},  {2, 4},   {1, 4},  {4, 8}, {3, 8},
                                {8, 16}, {16, 32}, {1, 32}, {3, 32}};
  uint64_t seed = 1;
  for (const NmPattern p : patterns) {
    for (const int64_t depth : {int64_t{32}, int64_t{64}, int64_t{96} + p.m, int64_t{p.m}}) {
      for (const int64_t rows : {1, 15, 16, 17, 32, 33, 67}) {
        for (const NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
          check_case({9, depth, rows, p, axis}, seed++);
        }
      }
    }
    for (const int64_t tokens : {1, 7, 8, 19, 259}) {
      check_case({tokens, 64 + p.m, 35, p, NmAxis::kRows}, seed++);
    }
  }
}

TEST(NmGemmBf16, DepthBlocks) {
  // Past the kernel's K block of 64 chunks (2048 columns): outputs stored and reloaded.
  check_case({11, 2048 + 96, 40, {2, 4}, NmAxis::kRows}, 5);
  check_case({11, 4096 + 4, 33, {2, 4}, NmAxis::kCols}, 6);
}

TEST(NmGemmBf16, ThreadsDoNotChangeBits) {
  const Case c{600, 200, 70, {2, 4}, NmAxis::kRows};
  std::vector<float> one, two;
  {
    const ScopedNumThreads threads(1);
    one = check_case(c, 21);
  }
  {
    const ScopedNumThreads threads(2);
    two = check_case(c, 21);
  }
  EXPECT_EQ(one, two);
}

TEST(NmGemmBf16, Fp32InputsAndBiasEqualTheBf16Call) {
  // fp32 X rounded as the kernel loads it, against the bf16 call on a rounded copy; the bias
  // added by the work items, against adding it afterwards. Bit for bit, at both levels, with ties
  // of the rounding (x.5 ulp of bf16), denormals and a partial chunk.
  for (const Case& c :
       {Case{19, 96 + 8, 45, {2, 4}, NmAxis::kRows}, Case{260, 64, 70, {8, 16}, NmAxis::kCols},
        Case{3, 4, 5, {1, 4}, NmAxis::kRows}}) {
    const Matrix d = c.axis == NmAxis::kRows
                         ? testing::random_nm(c.rows, c.depth, c.pattern, c.axis, 8)
                         : testing::random_nm(c.depth, c.rows, c.pattern, c.axis, 8);
    const NmGemmBf16Operand a = nm_gemm_bf16_pack(nm_compress(d.view(), c.pattern, c.axis));
    Matrix x = testing::random_matrix(c.tokens, c.depth, 9);
    x(0, 0) = 1.0f + 0x1p-8f;                  // a tie: rounds to even (1.0)
    x(c.tokens - 1, c.depth - 1) = 0x1p-130f;  // a denormal
    const Bf16Matrix x16 = to_bf16(x, c.depth);
    const Matrix bias = testing::random_matrix(1, c.rows, 10);
    for (const bool scalar : {false, true}) {
      const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
      Matrix from16(c.tokens, c.rows), from32(c.tokens, c.rows), biased(c.tokens, c.rows);
      nm_gemm_bf16(x16.view(), a, from16.view());
      nm_gemm_bf16(x.view(), a, from32.view());
      nm_gemm_bf16(x.view(), a, biased.view(), bias.data());
      for (int64_t t = 0; t < c.tokens; ++t) {
        for (int64_t r = 0; r < c.rows; ++r) {
          ASSERT_EQ(std::bit_cast<uint32_t>(from32(t, r)), std::bit_cast<uint32_t>(from16(t, r)))
              << describe(c) << (scalar ? " scalar" : "") << " y(" << t << ", " << r << ")";
          ASSERT_EQ(biased(t, r), from16(t, r) + bias(0, r)) << describe(c);
        }
      }
    }
  }
}

TEST(NmGemmBf16, PackMaskedEqualsPackOfCompressed) {
  // Rows around the 32-row block, depth with a partial last chunk, groups keeping fewer than n
  // (random_nm), a kept -0.0 and a kept denormal, a leading dimension past the width; the operand
  // reused.
  NmGemmBf16Operand masked;
  uint64_t seed = 40;
  for (const NmPattern p :
       {NmPattern{2, 4}, {1, 4}, {3, 4}, {1, 2}, {3, 8}, {8, 16}, {16, 32}, {1, 32}, {3, 32}}) {
    for (const int64_t rows : {1, 31, 33, 70}) {
      const int64_t depth = 64 + p.m;
      const Matrix d = testing::random_nm(rows, depth, p, NmAxis::kRows, seed++);
      Matrix a(rows, depth + 3);
      BitMask mask(rows, depth);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t k = 0; k < depth; ++k) {
          a(r, k) = d(r, k);
          if (d(r, k) != 0.0f) mask.set(r, k);
        }
      }
      for (int64_t r = 0; r < rows; r += 7) {  // a kept -0.0, then a kept denormal (read as 0)
        for (int64_t k = 0, done = 0; k < depth && done < 2; ++k) {
          if (mask.get(r, k)) a(r, k) = done++ == 0 ? -0.0f : -0x1p-130f;
        }
      }
      const ConstMatrixViewF av(a.data(), rows, depth, depth + 3);
      const NmGemmBf16Operand ref = nm_gemm_bf16_pack(nm_compress_masked(av, mask, p));
      for (const bool scalar : {false, true}) {  // m = 4 has an AVX-512 packer
        {
          const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
          nm_gemm_bf16_pack_masked_into(av, mask, p, masked);
        }
        const std::string what =
            p.to_string() + " rows " + std::to_string(rows) + (scalar ? " scalar" : "");
        EXPECT_EQ(masked.rows, rows) << what;
        EXPECT_EQ(masked.depth, depth) << what;
        testing::expect_same_buffer(masked.values, ref.values, ("values " + what).c_str());
        testing::expect_same_buffer(masked.index, ref.index, ("index " + what).c_str());
      }
    }
  }
  BitMask full(4, 8);
  full.fill(true);
  const Matrix a = testing::random_matrix(4, 8, 3);
  for (const bool scalar : {false, true}) {
    const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
    testing::expect_error(
        [&] {
          nm_gemm_bf16_pack_masked_into(a.view(), full, {2, 4}, masked);
        },
        "row 0 group 0 (columns 0..3) keeps 4 > n (2)");
  }
  testing::expect_error(
      [&] {
        nm_gemm_bf16_pack_masked_into(a.view(), BitMask(4, 4), {2, 4}, masked);
      },
      "mask shape (4 x 4) differs");
}

TEST(NmGemmBf16, PackOfCompressedIsTheSameAtEveryLevel) {
  // 2:4 has an AVX-512 packer (nm_wgrad_bf16 packs dYᵀ with it every call): word for word the
  // scalar one, for rows around the 32-row block and its halves, a partial last chunk, both
  // axes, denormal, -0 and rounding-tie values; one operand reused across patterns and shapes
  // (the padding words are zero-filled only when the layout changes).
  NmGemmBf16Operand reused;
  uint64_t seed = 90;
  for (const NmPattern p : {NmPattern{2, 4}, {1, 4}, {2, 4}, {4, 8}, {2, 4}}) {
    for (const int64_t rows : {1, 16, 17, 33, 70}) {
      for (const int64_t depth : {int64_t{4}, int64_t{36}, int64_t{64}, int64_t{100}}) {
        if (depth % p.m != 0) continue;
        for (const NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
          Matrix d = axis == NmAxis::kRows ? testing::random_nm(rows, depth, p, axis, seed++)
                                           : testing::random_nm(depth, rows, p, axis, seed++);
          // Specials where entries are kept: a denormal, -0 (stored +0) and a tie (1 + 2^-8).
          const float specials[] = {0x1p-130f, -0.0f, 1.0f + 0x1p-8f, -0x1.8p-127f};
          for (int64_t i = 0, k = 0; i < d.size(); i += 5) {
            if (d.data()[i] != 0.0f) d.data()[i] = specials[k++ % 4];
          }
          const CompressedNm c = nm_compress(d.view(), p, axis);
          NmGemmBf16Operand want;
          {
            const ScopedIsa isa(Isa::kScalar);
            nm_gemm_bf16_pack_into(c, want);
          }
          const NmGemmBf16Operand fresh = nm_gemm_bf16_pack(c);
          nm_gemm_bf16_pack_into(c, reused);
          const std::string what = p.to_string() + " rows " + std::to_string(rows) + " depth " +
                                   std::to_string(depth) + " " + std::string(axis_name(axis));
          testing::expect_same_buffer(fresh.values, want.values, ("values " + what).c_str());
          testing::expect_same_buffer(fresh.index, want.index, ("index " + what).c_str());
          testing::expect_same_buffer(reused.values, want.values, ("reused " + what).c_str());
          testing::expect_same_buffer(reused.index, want.index, ("reused " + what).c_str());
        }
      }
    }
  }
}

TEST(NmGemmBf16, PackTransposedEqualsTransposeThenPack) {
  // A = (P W)ᵀ with and without a row order, C around the 32-row block and past the staged route's
  // 512-row segments, K not a multiple of 32 (a partial last chunk). At m = 4 on the AVX-512 BF16
  // level the packer stages blocks of W itself; otherwise it packs from a transposed copy it keeps
  // per thread: the test guards both, the copy's reuse across shapes and the order check.
  NmGemmBf16Operand fused;
  NmGemmBf16Operand ref;
  uint64_t seed = 60;
  for (const NmPattern p : {NmPattern{2, 4}, {1, 4}, {4, 8}}) {
    for (const int64_t c : {int64_t{5}, int64_t{32}, int64_t{45}, int64_t{600}}) {
      for (const int64_t k : {int64_t{8}, int64_t{36}, int64_t{100}}) {
        if (k % p.m != 0) continue;
        const Matrix d = testing::random_nm(c, k, p, NmAxis::kRows, seed++);  // the mask's shape
        BitMask mask_t(c, k);
        for (int64_t i = 0; i < c; ++i) {
          for (int64_t j = 0; j < k; ++j) {
            if (d(i, j) != 0.0f) mask_t.set(i, j);
          }
        }
        const Matrix w = testing::random_matrix(k + 3, c, seed++);  // R = k + 3 rows
        std::vector<int64_t> order(static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i) order[static_cast<size_t>(i)] = (7 * i + 2) % (k + 3);
        for (const bool ordered : {false, true}) {
          const ConstMatrixViewF wv(w.data(), ordered ? k + 3 : k, c);
          const std::span<const int64_t> o =
              ordered ? std::span<const int64_t>(order) : std::span<const int64_t>();
          Matrix wt(c, k);
          transpose_into(wv, wt.view(), o);
          for (const bool scalar : {false, true}) {
            const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
            nm_gemm_bf16_pack_masked_transposed_into(wv, o, mask_t, p, fused);
            nm_gemm_bf16_pack_masked_into(wt.view(), mask_t, p, ref);
            const std::string what = p.to_string() + " C" + std::to_string(c) + " K" +
                                     std::to_string(k) + (ordered ? " ordered" : "") +
                                     (scalar ? " scalar" : "");
            testing::expect_same_buffer(fused.values, ref.values, ("values " + what).c_str());
            testing::expect_same_buffer(fused.index, ref.index, ("index " + what).c_str());
          }
        }
      }
    }
  }
  const Matrix w = testing::random_matrix(8, 8, 1);
  BitMask overfull(8, 8);
  overfull.set(5, 4);
  overfull.set(5, 5);
  overfull.set(5, 6);
  for (const bool scalar : {false, true}) {
    const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
    testing::expect_error(
        [&] {
          nm_gemm_bf16_pack_masked_transposed_into(w.view(), {}, overfull, {2, 4}, fused);
        },
        "row 5 group 1 (columns 4..7) keeps 3 > n (2)");
  }
  const std::vector<int64_t> bad{0, 1, 2, 9, 4, 5, 6, 7};
  testing::expect_error(
      [&] {
        nm_gemm_bf16_pack_masked_transposed_into(w.view(), bad, BitMask(8, 8), {2, 4}, fused);
      },
      "9");
}

// The index words depend on the mask alone: a repack from the mask they came from
// (NmGemmBf16Operand::index_mask) writes the values only; another mask, a pack from a compression
// or a failed pack leave no index words to reuse. Both masked packers, at both levels (2:4 has
// the AVX-512 packers), rows and depth around blocks and chunks; each result equals a fresh pack.
TEST(NmGemmBf16, RepackFromTheSameMaskWritesTheValues) {
  uint64_t seed = 150;
  for (const bool scalar : {false, true}) {
    const ScopedIsa isa(scalar ? Isa::kScalar : isa_supported());
    for (const NmPattern p : {NmPattern{2, 4}, {4, 8}, {16, 32}}) {
      for (const auto& [rows, depth] :
           {std::pair<int64_t, int64_t>{1, 32}, {33, 100 / p.m * p.m}, {70, 160}}) {
        const std::string what = p.to_string() + " " + std::to_string(rows) + " x " +
                                 std::to_string(depth) + (scalar ? " scalar" : "");
        SCOPED_TRACE(what);
        const Matrix d = testing::random_nm(rows, depth, p, NmAxis::kRows, seed++);
        BitMask mask(rows, depth);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < depth; ++k) {
            if (d(r, k) != 0.0f) mask.set(r, k);
          }
        }
        BitMask other = mask;  // row 0's first group emptied, or keeping column 0
        for (int64_t k = 0; k < p.m; ++k) other.set(0, k, false);
        if (other == mask) other.set(0, 0);
        const Matrix a1 = testing::random_matrix(rows, depth, seed++);
        const Matrix a2 = testing::random_matrix(rows, depth, seed++);
        const auto fresh = [&](const Matrix& a, const BitMask& m) {
          NmGemmBf16Operand packed;
          nm_gemm_bf16_pack_masked_into(a.view(), m, p, packed);
          return packed;
        };
        NmGemmBf16Operand op;
        nm_gemm_bf16_pack_masked_into(a1.view(), mask, p, op);
        EXPECT_EQ(op.index_mask, mask);
        std::fill_n(op.index.data(), op.index.size(), uint16_t{999});  // poisoned to show reuse
        nm_gemm_bf16_pack_masked_into(a2.view(), mask, p, op);
        testing::expect_same_buffer(op.values, fresh(a2, mask).values, "values");
        EXPECT_EQ(op.index.data()[0], 999);
        nm_gemm_bf16_pack_masked_into(a2.view(), other, p, op);
        const NmGemmBf16Operand want = fresh(a2, other);
        testing::expect_same_buffer(op.values, want.values, "values, another mask");
        testing::expect_same_buffer(op.index, want.index, "index, another mask");
        // A compression's pack forgets the mask.
        nm_gemm_bf16_pack_into(nm_compress_masked(a1.view(), mask, p), op);
        EXPECT_EQ(op.index_mask, BitMask());
        nm_gemm_bf16_pack_masked_into(a2.view(), other, p, op);
        testing::expect_same_buffer(op.index, want.index, "index after a compression's pack");
        // The transposed packer, (P W)ᵀ with a row order, mask_t = the same masks.
        const Matrix w1 = testing::random_matrix(depth + 2, rows, seed++);
        const Matrix w2 = testing::random_matrix(depth + 2, rows, seed++);
        std::vector<int64_t> order(static_cast<size_t>(depth));
        for (int64_t i = 0; i < depth; ++i) {
          order[static_cast<size_t>(i)] = (5 * i + 1) % (depth + 2);
        }
        const auto fresh_t = [&](const Matrix& w, const BitMask& m) {
          NmGemmBf16Operand packed;
          nm_gemm_bf16_pack_masked_transposed_into(w.view(), order, m, p, packed);
          return packed;
        };
        NmGemmBf16Operand t;
        nm_gemm_bf16_pack_masked_transposed_into(w1.view(), order, mask, p, t);
        EXPECT_EQ(t.index_mask, mask);
        std::fill_n(t.index.data(), t.index.size(), uint16_t{999});
        nm_gemm_bf16_pack_masked_transposed_into(w2.view(), order, mask, p, t);
        testing::expect_same_buffer(t.values, fresh_t(w2, mask).values, "transposed values");
        EXPECT_EQ(t.index.data()[0], 999);
        nm_gemm_bf16_pack_masked_transposed_into(w2.view(), order, other, p, t);
        const NmGemmBf16Operand t_want = fresh_t(w2, other);
        testing::expect_same_buffer(t.values, t_want.values, "transposed values, another mask");
        testing::expect_same_buffer(t.index, t_want.index, "transposed index, another mask");
      }
    }
  }
  // A failed pack forgets the mask: the next pack of the old mask writes the index words again.
  const Matrix a = testing::random_matrix(4, 8, 5);
  BitMask mask(4, 8);
  for (int64_t r = 0; r < 4; ++r) {
    mask.set(r, 1);
    mask.set(r, 6);
  }
  NmGemmBf16Operand op;
  nm_gemm_bf16_pack_masked_into(a.view(), mask, {2, 4}, op);
  BitMask overfull = mask;
  overfull.set(2, 4);
  overfull.set(2, 5);
  testing::expect_error(
      [&] {
        nm_gemm_bf16_pack_masked_into(a.view(), overfull, {2, 4}, op);
      },
      "row 2 group 1 (columns 4..7) keeps 3 > n (2)");
  EXPECT_EQ(op.index_mask, BitMask());
}

TEST(NmGemmBf16, Errors) {
  const Matrix d = testing::random_nm(32, 64, {2, 4}, NmAxis::kRows, 3);
  const NmGemmBf16Operand a = nm_gemm_bf16_pack(nm_compress(d.view(), {2, 4}));
  std::vector<uint16_t> x(8 * 64, 0);
  std::vector<float> y(8 * 32);
  const MatrixView<const uint16_t> xv(x.data(), 8, 64);
  testing::expect_error(
      [&] {
        nm_gemm_bf16(MatrixView<const uint16_t>(x.data(), 8, 60), a, MatrixViewF(y.data(), 8, 32));
      },
      "x has 60 columns, the operand's depth is 64");
  testing::expect_error([&] { nm_gemm_bf16(xv, a, MatrixViewF(y.data(), 8, 31)); },
                        "y is 8 x 31, expected 8 x 32");
  testing::expect_error(
      [&] { nm_gemm_bf16(xv, a, MatrixViewF(reinterpret_cast<float*>(x.data()), 8, 32)); },
      "x and y overlap");
  NmGemmBf16Operand unpacked = a;
  unpacked.values.resize(16);
  testing::expect_error([&] { nm_gemm_bf16(xv, a, MatrixViewF(y.data(), 8, 32), y.data() + 40); },
                        "the bias lies inside y");
  testing::expect_error([&] { nm_gemm_bf16(xv, unpacked, MatrixViewF(y.data(), 8, 32)); },
                        "not packed");
  const Matrix d6 = testing::random_nm(4, 36, {3, 6}, NmAxis::kRows, 3);
  testing::expect_error(
      [&] {
        nm_gemm_bf16_pack(nm_compress(d6.view(), {3, 6}));
      },
      "pattern 3:6 is not supported");
  CompressedNm corrupt = nm_compress(d.view(), {2, 4});
  corrupt.values.resize(3);
  testing::expect_error([&] { nm_gemm_bf16_pack(corrupt); }, "nm_validate");
  EXPECT_TRUE(nm_gemm_bf16_check(xv, a, MatrixViewF(y.data(), 8, 32)).empty());
}

}  // namespace
}  // namespace nms
