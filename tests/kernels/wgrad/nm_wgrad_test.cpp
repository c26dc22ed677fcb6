// nm_wgrad (dW = dYᵀ X, dY N:M along tokens) against a decompress + double-precision reference;
// every ISA level bit for bit against the scalar path; sizes around every tile edge (3 rows,
// 16 / 128 columns, the K-block of 64 tokens rounded down to a multiple of m); strides; threads;
// MVUE input; errors.
//
// Tolerance: each dW element is a chain of k fused multiply-adds (k = T / m · n kept slots of its
// row, padding zeros included), each rounding once, so |dW − dW_exact| <= γ_k Σ_t |dY_to X_ti|
// with γ_k = k u / (1 − k u), u = 2^-24 (Higham, Accuracy and Stability, §3.1); the double
// reference adds a negligible 2^-53 relative error on top.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

#include "grad/prune_lanes.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_lanes_layout.h"
#include "kernels/wgrad/wgrad_kernels.h"
#include "kernels/wgrad/wgrad_lanes.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/nm_wgrad.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

// dY [tokens, out], N:M down every column: each group keeps a random subset of at most n (every
// 5th group keeps one fewer, so groups padded with zeros occur); every 7th column is all zero.
Matrix random_dy(int64_t tokens, int64_t out, NmPattern p, uint64_t seed) {
  Matrix d = testing::random_matrix(tokens, out, seed);
  const CounterRng rng(seed, 99);
  uint64_t draw = 0;
  std::vector<int> order(static_cast<size_t>(p.m));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t g = 0; g < tokens / p.m; ++g) {
      for (int i = 0; i < p.m; ++i) order[static_cast<size_t>(i)] = i;
      for (int i = p.m - 1; i > 0; --i) {  // Fisher-Yates
        const auto j = static_cast<int>(rng.word(draw++) % static_cast<uint32_t>(i + 1));
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
      }
      const int keep = o % 7 == 3 ? 0 : (o + g) % 5 == 0 ? p.n - 1 : p.n;
      for (int i = keep; i < p.m; ++i) d(g * p.m + order[static_cast<size_t>(i)], o) = 0.0f;
    }
  }
  return d;
}

// Keeps the first ISA level's result in `first`; later levels must equal it bit for bit.
void expect_same_as_first_level(Matrix& first, ConstMatrixViewF dw, Isa isa) {
  Matrix dense(dw.rows(), dw.cols());
  for (int64_t o = 0; o < dw.rows(); ++o) {
    for (int64_t i = 0; i < dw.cols(); ++i) dense(o, i) = dw(o, i);
  }
  if (first.size() == 0) {
    first = std::move(dense);
    return;
  }
  EXPECT_EQ(std::memcmp(first.data(), dense.data(), sizeof(float) * first.size()), 0)
      << "isa " << isa_name(isa) << " differs from the first level";
}

// Every ISA level with each of its kernels (nm_wgrad.h; kPermute, AVX-512 only, falls back to
// kPanels where m does not divide 16): each must give the bits of the first.
constexpr std::array<std::pair<Isa, NmWgradKernel>, 6> kLevels{
    {{Isa::kScalar, NmWgradKernel::kAuto},
     {Isa::kAvx2, NmWgradKernel::kPanels},
     {Isa::kAvx2, NmWgradKernel::kGemm},
     {Isa::kAvx512, NmWgradKernel::kPanels},
     {Isa::kAvx512, NmWgradKernel::kGemm},
     {Isa::kAvx512, NmWgradKernel::kPermute}}};

struct Case {
  int64_t tokens, in, out;
  NmPattern pattern;
};

std::string describe(const Case& c) {
  return c.pattern.to_string() + " T" + std::to_string(c.tokens) + " in" + std::to_string(c.in) +
         " out" + std::to_string(c.out);
}

// Runs one case at every ISA level (ld of x and dw = width + pad); checks the bound against the
// double reference, that nothing past the row is written, and bitwise equality across levels.
void check_case(const Case& c, uint64_t seed, int64_t pad = 0) {
  SCOPED_TRACE(describe(c));
  const Matrix d = random_dy(c.tokens, c.out, c.pattern, seed);
  const CompressedNm dy = nm_compress(d.view(), c.pattern, NmAxis::kCols);
  Matrix xbuf = testing::random_matrix(c.tokens, c.in + pad, seed + 1);
  const ConstMatrixViewF x(xbuf.data(), c.tokens, c.in, c.in + pad);
  const int64_t kept = c.tokens / c.pattern.m * c.pattern.n;
  const double u = std::ldexp(1.0, -24);
  const double gamma = kept * u / (1.0 - kept * u);

  std::vector<double> ref(static_cast<size_t>(c.out * c.in));
  std::vector<double> mag(ref.size());
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t o = 0; o < c.out; ++o) {
      const double dv = d(t, o);
      if (dv == 0.0) continue;
      for (int64_t i = 0; i < c.in; ++i) {
        ref[static_cast<size_t>(o * c.in + i)] += dv * x(t, i);
        mag[static_cast<size_t>(o * c.in + i)] += std::fabs(dv * x(t, i));
      }
    }
  }

  Matrix first;
  for (auto [isa, kernel] : kLevels) {
    if (isa > isa_supported()) continue;
    ScopedIsa level(isa);
    Matrix wbuf(c.out, c.in + pad);
    for (int64_t k = 0; k < wbuf.size(); ++k) wbuf.data()[k] = -7.0f;  // sentinel
    const MatrixViewF dw(wbuf.data(), c.out, c.in, c.in + pad);
    nm_wgrad(dy, x, dw, nullptr, nullptr, kernel);
    for (int64_t o = 0; o < c.out; ++o) {
      for (int64_t i = 0; i < c.in; ++i) {
        const size_t k = static_cast<size_t>(o * c.in + i);
        ASSERT_LE(std::fabs(dw(o, i) - ref[k]), gamma * mag[k] + 1e-30)
            << "isa " << isa_name(isa) << " at (" << o << ", " << i << ")";
      }
      for (int64_t i = c.in; i < c.in + pad; ++i) {
        ASSERT_EQ(wbuf(o, i), -7.0f) << "wrote past the row at " << o << ", " << i;
      }
    }
    expect_same_as_first_level(first, dw, isa);
  }
}

TEST(NmWgrad, RowAndColumnTileEdges) {
  // Micro-tile: 3 rows of dW x 128 columns (8 vectors of 16).
  uint64_t seed = 1;
  for (int64_t out : {1, 2, 3, 4, 9}) {
    for (int64_t in : {1, 15, 16, 17, 63, 127, 128, 129, 259}) {
      check_case({12, in, out, {2, 4}}, seed++);
    }
  }
}

TEST(NmWgrad, PermuteTileEdges) {
  // kPermute: tiles of 8 in features x 32 out features, items of 256 in features, chunks of 16
  // tokens, K blocks of 128 chunks (2048 tokens).
  uint64_t seed = 50;
  for (int64_t out : {1, 15, 16, 17, 31, 32, 33, 67}) {
    for (int64_t in : {1, 7, 8, 9, 255, 256, 257, 515}) {
      check_case({36, in, out, {2, 4}}, seed++, /*pad=*/out % 3);
    }
  }
  for (int64_t tokens : {16, 2044, 2048, 2052, 4100}) {
    check_case({tokens, 9, 33, {2, 4}}, seed++, 1);
    check_case({tokens, 9, 33, {1, 4}}, seed++, 1);
  }
  for (NmPattern p : {NmPattern{8, 16}, NmPattern{1, 2}, NmPattern{4, 8}}) {
    for (int64_t tokens : {16, 48, 2064}) check_case({tokens, 10, 40, p}, seed++, 2);
  }
  // The hybrid super-tiles: 64 in features where a chunk of 16 tokens holds 8 or more slots, 128
  // at 1:4 (lane_hybrid_tokens), each with a tail of permute-only tiles.
  for (NmPattern p : {NmPattern{1, 4}, NmPattern{1, 2}, NmPattern{3, 4}}) {
    for (int64_t in : {63, 64, 127, 128, 129, 300}) check_case({36, in, 40, p}, seed++, 1);
  }
}

TEST(NmWgrad, TokenBlockEdges) {
  // K-block: 64 tokens when m divides 64, else the largest multiple of m below 64 (63 for m = 7,
  // 60 for m = 12); m = 64: one group per block.
  uint64_t seed = 100;
  for (int64_t tokens : {4, 60, 64, 68, 128, 132, 196}) {
    check_case({tokens, 70, 13, {2, 4}}, seed++, /*pad=*/3);
  }
  // 1:4 and 2:4 run kPanels' direct micro-tile at AVX-512: index words read from the compressed
  // rows, the last block's word cut at the end of the row (T 68: 1 or 2 bytes), tail tiles of 1
  // and 2 rows (out 13, 14) in both panels (in 200).
  for (int64_t tokens : {4, 64, 68, 132, 200}) {
    check_case({tokens, 200, 14, {1, 4}}, seed++, /*pad=*/1);
    check_case({tokens, 200, 14, {2, 4}}, seed++);
  }
  for (int64_t tokens : {63, 70, 126, 133}) check_case({tokens, 20, 7, {3, 7}}, seed++, 1);
  for (int64_t tokens : {60, 72, 120, 132}) check_case({tokens, 20, 5, {5, 12}}, seed++, 1);
  for (int64_t tokens : {64, 128, 192, 320}) check_case({tokens, 17, 8, {5, 64}}, seed++);
}

TEST(NmWgrad, Patterns) {
  EXPECT_TRUE(nm_wgrad_has_fast_path({2, 4}));
  EXPECT_TRUE(nm_wgrad_has_fast_path({3, 7}));
  EXPECT_FALSE(nm_wgrad_has_fast_path({5, 4}));
  const NmPattern patterns[] = {{1, 1},   {1, 2}, {2, 4}, {1, 4},  {4, 8},   {8, 16},
                                {16, 32}, {3, 7}, {2, 3}, {5, 12}, {32, 64}, {4, 4}};
  uint64_t seed = 200;
  for (NmPattern p : patterns) {
    const int64_t tokens = p.m * (p.m >= 32 ? 5 : 300 / p.m);
    check_case({tokens, 67, 8, p}, seed++, 2);
  }
}

TEST(NmWgrad, EmptyShapes) {
  // T = 0: dW is all zero. out = 0 or in = 0: nothing to do.
  const CompressedNm dy0 = nm_compress(Matrix(0, 5).view(), {2, 4}, NmAxis::kCols);
  Matrix x0(0, 9);
  Matrix w(5, 9);
  for (int64_t k = 0; k < w.size(); ++k) w.data()[k] = 3.0f;
  nm_wgrad(dy0, x0.view(), w.view());
  for (int64_t k = 0; k < w.size(); ++k) ASSERT_EQ(w.data()[k], 0.0f);
  const CompressedNm dy1 = nm_compress(Matrix(8, 0).view(), {2, 4}, NmAxis::kCols);
  Matrix x1(8, 9);
  Matrix w1(0, 9);
  nm_wgrad(dy1, x1.view(), w1.view());
  const CompressedNm dy2 = nm_compress(random_dy(8, 3, {2, 4}, 1).view(), {2, 4}, NmAxis::kCols);
  Matrix x2(8, 0);
  Matrix w2(3, 0);
  nm_wgrad(dy2, x2.view(), w2.view());
}

TEST(NmWgrad, SameBitsForOneAndTwoThreads) {
  // 300 columns: 3 panels; 16 columns: 1 panel (rows split); 2000 columns: columns split.
  // kGemm: 500 rows of dW make two row chunks of nm_gemm's blocking; kPermute: 300 in features
  // make two items of 256, 16 and 500 rows four row parts.
  for (NmWgradKernel kernel :
       {NmWgradKernel::kPanels, NmWgradKernel::kGemm, NmWgradKernel::kPermute}) {
    for (int64_t in : {300, 16, 2000}) {
      const int64_t out = kernel == NmWgradKernel::kPanels ? 50 : 500;
      const Matrix d = random_dy(520, out, {2, 4}, 3);
      const CompressedNm dy = nm_compress(d.view(), {2, 4}, NmAxis::kCols);
      const Matrix x = testing::random_matrix(520, in, 4);
      Matrix w1(out, in);
      Matrix w2(out, in);
      {
        ScopedNumThreads t(1);
        nm_wgrad(dy, x.view(), w1.view(), nullptr, nullptr, kernel);
      }
      {
        ScopedNumThreads t(2);
        nm_wgrad(dy, x.view(), w2.view(), nullptr, nullptr, kernel);
      }
      EXPECT_EQ(std::memcmp(w1.data(), w2.data(), sizeof(float) * w1.size()), 0) << "in " << in;
    }
  }
}

TEST(NmWgrad, MvueGradientAndWorkspaceReuse) {
  // The intended producer: MVUE 2:4 along tokens. A warmed workspace allocates nothing.
  const Matrix g = testing::random_matrix(256, 30, 11);
  const CompressedNm dy = grad_prune_compressed(
      g.view(), {GradMethod::kMvue, {2, 4}, NmAxis::kCols, /*seed=*/5, /*stream=*/1});
  const Matrix dense = nm_decompress(dy);
  const Matrix x = testing::random_matrix(256, 90, 12);
  NmWgradWorkspace ws;
  Matrix w(30, 90);
  nm_wgrad(dy, x.view(), w.view(), &ws);
  const float* panels = ws.x_panels.data();
  const float* tiles = ws.tile_values.data();
  Matrix w2(30, 90);
  nm_wgrad(dy, x.view(), w2.view(), &ws);
  EXPECT_EQ(panels, ws.x_panels.data());
  EXPECT_EQ(tiles, ws.tile_values.data());
  EXPECT_EQ(std::memcmp(w.data(), w2.data(), sizeof(float) * w.size()), 0);
  const double gamma = 128 * std::ldexp(1.0, -24) / (1.0 - 128 * std::ldexp(1.0, -24));
  for (int64_t o = 0; o < 30; ++o) {
    for (int64_t i = 0; i < 90; ++i) {
      double ref = 0.0;
      double mag = 0.0;
      for (int64_t t = 0; t < 256; ++t) {
        ref += double{dense(t, o)} * x(t, i);
        mag += std::fabs(double{dense(t, o)} * x(t, i));
      }
      ASSERT_LE(std::fabs(w(o, i) - ref), gamma * mag + 1e-30) << o << ", " << i;
    }
  }
  // A smaller problem through the same workspace.
  const CompressedNm small = nm_compress(random_dy(8, 3, {2, 4}, 1).view(), {2, 4}, NmAxis::kCols);
  const Matrix xs = testing::random_matrix(8, 5, 2);
  Matrix ws_out(3, 5);
  Matrix plain(3, 5);
  nm_wgrad(small, xs.view(), ws_out.view(), &ws);
  nm_wgrad(small, xs.view(), plain.view());
  EXPECT_EQ(std::memcmp(ws_out.data(), plain.data(), sizeof(float) * plain.size()), 0);
}

TEST(NmWgrad, DecodersAgree) {
  // The AVX-512 decoder against the scalar one for every index width, block starts that are not
  // byte-aligned in the bit string, partial 16-slot steps, and indices >= m.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  const CounterRng rng(77, 0);
  uint64_t draw = 0;
  int32_t group_token[detail::kWgradMaxBlockSlots + 16] = {};
  for (int m : {2, 3, 4, 7, 8, 13, 16, 31, 32, 33, 64}) {
    const int n = (m + 1) / 2;
    for (int s = 0; s < detail::kWgradMaxBlockSlots; ++s) group_token[s] = s / n * m;
    NmPattern p{n, m};
    const int bits = p.index_bits();
    const int64_t slots_per_row = 40 * n;
    const int64_t row_bytes = (slots_per_row * bits + 7) / 8;
    std::vector<uint8_t> idx(static_cast<size_t>(row_bytes));
    for (auto& b : idx) b = static_cast<uint8_t>(rng.word(draw++));
    std::vector<float> values(static_cast<size_t>(slots_per_row));
    for (auto& v : values) v = rng.uniform(draw++);
    for (int64_t s0 : {int64_t{0}, int64_t{n}, int64_t{3 * n}, int64_t{7 * n}}) {
      for (int count : {1, 5, 16, 17, 33}) {
        if (s0 + count > slots_per_row) continue;
        const detail::WgradDecodeArgs a{
            values.data() + s0, idx.data(), row_bytes, s0, count, bits, m, group_token};
        float v1[detail::kWgradMaxBlockSlots] = {};
        float v2[detail::kWgradMaxBlockSlots] = {};
        int32_t o1[detail::kWgradMaxBlockSlots] = {};
        int32_t o2[detail::kWgradMaxBlockSlots] = {};
        const bool ok1 = detail::wgrad_decode_scalar(a, v1, o1);
        const bool ok2 = detail::wgrad_decode_avx512(a, v2, o2);
        SCOPED_TRACE(p.to_string() + " s0 " + std::to_string(s0) + " count " +
                     std::to_string(count));
        EXPECT_EQ(ok1, ok2);
        for (int s = 0; s < count; ++s) {
          ASSERT_EQ(v1[s], v2[s]) << s;
          ASSERT_EQ(o1[s], o2[s]) << s;
        }
      }
    }
  }
}

TEST(NmWgrad, LanePieceWritersAgree) {
  // The AVX-512 writer of the permute route's lane pieces (16 x 16 transposes) against the scalar
  // one: every slot count from 1 to 64 (partial 16-slot steps), values with sign bits and NaN
  // payloads (moved as bits), offsets of every token of the 64-token piece; outputs past the
  // piece's slots are left as they were.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  constexpr int kRows = detail::kLaneRows;
  constexpr int kSlots = detail::kWgradMaxBlockSlots;
  const CounterRng rng(78, 0);
  std::vector<float> vals(kRows * kSlots);
  std::vector<int32_t> offs(kRows * kSlots);
  for (int k = 0; k < kRows * kSlots; ++k) {
    const uint32_t bits = rng.word(static_cast<uint64_t>(k));
    std::memcpy(&vals[static_cast<size_t>(k)], &bits, sizeof(bits));
    offs[static_cast<size_t>(k)] = static_cast<int32_t>(bits % kSlots) * detail::kWgradPanelBytes;
  }
  // Outputs 64-byte aligned (the writer streams whole lines), one slot row longer than a piece.
  const int64_t out_size = kRows * (kSlots + 1);
  const auto run = [&](detail::WgradLanePieceFn write, int slots, AlignedBuffer<float>& v,
                       AlignedBuffer<int32_t>& l) {
    v.resize_for_overwrite(out_size);
    l.resize_for_overwrite(out_size);
    std::fill(v.begin(), v.begin() + out_size, 7.0f);
    std::fill(l.begin(), l.begin() + out_size, -1);
    write(vals.data(), offs.data(), slots, v.data(), l.data());
  };
  AlignedBuffer<float> v1, v2;
  AlignedBuffer<int32_t> l1, l2;
  for (int slots = 1; slots <= kSlots; ++slots) {
    run(detail::wgrad_lane_piece_scalar, slots, v1, l1);
    run(detail::wgrad_lane_piece_avx512, slots, v2, l2);
    SCOPED_TRACE("slots " + std::to_string(slots));
    ASSERT_EQ(std::memcmp(v1.data(), v2.data(), out_size * sizeof(float)), 0);
    ASSERT_EQ(std::memcmp(l1.data(), l2.data(), out_size * sizeof(int32_t)), 0);
    EXPECT_EQ(v1[slots * kRows], 7.0f);
    EXPECT_EQ(l1[slots * kRows], -1);
  }
  // One element by hand: row 3, slot 5, token 37 of the piece -> lane 37 % 16 = 5.
  offs[3 * kSlots + 5] = 37 * detail::kWgradPanelBytes;
  run(detail::wgrad_lane_piece_avx512, kSlots, v2, l2);
  EXPECT_EQ(l2[5 * kRows + 3], 5);
  EXPECT_EQ(std::memcmp(&v2[5 * kRows + 3], &vals[3 * kSlots + 5], sizeof(float)), 0);
}

// The fused SR-STE decay: dw = λ (1 − M) ⊙ W + dYᵀ X, each element's chain of multiply-adds
// starting from λ·W (dropped) or 0 (kept). Checked against the double reference with one more
// rounding in the bound (γ_{k+1}, the start term counted in the magnitude), bit for bit across
// ISA levels, with strided W, mask and dw, around the tile edges, and at T = 0.
TEST(NmWgrad, FusedDecayStartsEachChainFromTheDecayTerm) {
  const float lambda = 0.375f;
  for (const Case& c : {Case{64, 130, 7, NmPattern{2, 4}}, Case{200, 17, 4, NmPattern{4, 8}},
                        Case{96, 260, 9, NmPattern{1, 4}}, Case{0, 33, 5, NmPattern{2, 4}},
                        Case{2064, 203, 35, NmPattern{2, 4}}}) {
    SCOPED_TRACE(describe(c));
    const Matrix d = random_dy(c.tokens, c.out, c.pattern, 5);
    const CompressedNm dy = nm_compress(d.view(), c.pattern, NmAxis::kCols);
    const Matrix x = testing::random_matrix(c.tokens, c.in, 6);
    Matrix wbuf = testing::random_matrix(c.out, c.in + 3, 7);
    const ConstMatrixViewF w(wbuf.data(), c.out, c.in, c.in + 3);
    const int64_t keep_ld = c.in + 5;
    std::vector<uint8_t> keep(static_cast<size_t>(c.out * keep_ld));
    for (size_t k = 0; k < keep.size(); ++k) keep[k] = static_cast<uint8_t>((k * 7 + k / 3) % 3);
    const NmWgradDecay decay{w, keep.data(), keep_ld, lambda};
    const int64_t kept = c.tokens / c.pattern.m * c.pattern.n + 1;
    const double u = std::ldexp(1.0, -24);
    const double gamma = kept * u / (1.0 - kept * u);
    Matrix first;
    for (auto [isa, kernel] : kLevels) {
      if (isa > isa_supported()) continue;
      ScopedIsa level(isa);
      Matrix dbuf(c.out, c.in + 2);
      const MatrixViewF dw(dbuf.data(), c.out, c.in, c.in + 2);
      nm_wgrad(dy, x.view(), dw, nullptr, &decay, kernel);
      for (int64_t o = 0; o < c.out; ++o) {
        for (int64_t i = 0; i < c.in; ++i) {
          const bool dropped = keep[static_cast<size_t>(o * keep_ld + i)] == 0;
          double ref = dropped ? double{lambda * w(o, i)} : 0.0;
          double mag = std::fabs(ref);
          for (int64_t t = 0; t < c.tokens; ++t) {
            ref += double{d(t, o)} * x(t, i);
            mag += std::fabs(double{d(t, o)} * x(t, i));
          }
          ASSERT_LE(std::fabs(dw(o, i) - ref), gamma * mag + 1e-30)
              << "isa " << isa_name(isa) << " at (" << o << ", " << i << ")";
          if (c.tokens == 0) {
            ASSERT_EQ(dw(o, i), dropped ? lambda * w(o, i) : 0.0f);
          }
        }
      }
      expect_same_as_first_level(first, dw, isa);
    }
  }
  const Matrix d = random_dy(8, 4, NmPattern{2, 4}, 1);
  const CompressedNm dy = nm_compress(d.view(), NmPattern{2, 4}, NmAxis::kCols);
  const Matrix x = testing::random_matrix(8, 6, 2);
  Matrix dw(4, 6);
  const Matrix w_bad(4, 5);
  std::vector<uint8_t> keep(24);
  const NmWgradDecay bad{w_bad.view(), keep.data(), 6, 0.1f};
  testing::expect_error([&] { nm_wgrad(dy, x.view(), dw.view(), nullptr, &bad); },
                        "the decay's W is 4 x 5, dw 4 x 6");
}

TEST(NmWgrad, GemmRouteWithPanelPairsAndSinglePanels) {
  // kGemm runs nm_gemm's broadcast kernel in its transposed form, with its token panels (here in
  // features) in pairs or one at a time (nm_gemm_panel_pairs, chosen by CPU): both give kernel
  // A's bits, around the pair edges (in 64, 127, 128, 129, 200) and with the decay.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "the broadcast kernel pairs at AVX-512";
  const ScopedIsa level(Isa::kAvx512);
  uint64_t seed = 700;
  for (const int64_t in : {64, 127, 128, 129, 200}) {
    for (const NmPattern p : {NmPattern{2, 4}, NmPattern{16, 32}}) {
      const Case c{p.m * 9, in, 13, p};
      SCOPED_TRACE(describe(c));
      const Matrix d = random_dy(c.tokens, c.out, p, seed++);
      const CompressedNm dy = nm_compress(d.view(), p, NmAxis::kCols);
      const Matrix x = testing::random_matrix(c.tokens, in, seed++);
      const Matrix w = testing::random_matrix(c.out, in, seed++);
      std::vector<uint8_t> keep(static_cast<size_t>(c.out * in));
      for (size_t k = 0; k < keep.size(); ++k) keep[k] = static_cast<uint8_t>(k % 4 != 1);
      const NmWgradDecay decay{w.view(), keep.data(), in, 0.5f};
      for (const NmWgradDecay* dec : {static_cast<const NmWgradDecay*>(nullptr), &decay}) {
        Matrix want(c.out, in);
        nm_wgrad(dy, x.view(), want.view(), nullptr, dec, NmWgradKernel::kPanels);
        for (const int pairs : {0, 1}) {
          detail::set_nm_gemm_panel_pairs_override(pairs);
          Matrix got(c.out, in);
          nm_wgrad(dy, x.view(), got.view(), nullptr, dec, NmWgradKernel::kGemm);
          detail::set_nm_gemm_panel_pairs_override(-1);
          EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0)
              << "pairs " << pairs << (dec ? ", decay" : "");
        }
      }
    }
  }
}

TEST(NmWgrad, PermuteRouteStreamsTheLastKBlockOfALargeDw) {
  // A dW of at least kWgradStreamBytes, 64-byte aligned with ld % 16 == 0: the permute route's
  // hybrid super-tiles (64 in features) write their rows with streaming stores in the last K
  // block only (T 64: one block; T 2064: 128 chunks, then 1), the tail tiles (16 in features past
  // the last super-tile) with plain ones. Bit for bit kernel A's result, with the decay, on 1 and
  // 2 threads.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "the permute route needs AVX-512";
  const ScopedIsa level(Isa::kAvx512);
  const int64_t in = 2064;
  const int64_t out = 1024;
  static_assert(1024 * 2064 * 4 >= detail::kWgradStreamBytes);
  const Matrix w = testing::random_matrix(out, in, 7);
  std::vector<uint8_t> keep(static_cast<size_t>(out * in));
  for (size_t k = 0; k < keep.size(); ++k) keep[k] = static_cast<uint8_t>(k % 3 != 0);
  const NmWgradDecay decay{w.view(), keep.data(), in, 0.25f};
  for (const int64_t tokens : {64, 2064}) {
    SCOPED_TRACE(tokens);
    const Matrix d = random_dy(tokens, out, {2, 4}, 8);
    const CompressedNm dy = nm_compress(d.view(), {2, 4}, NmAxis::kCols);
    const Matrix x = testing::random_matrix(tokens, in, 9);
    Matrix want(out, in);
    nm_wgrad(dy, x.view(), want.view(), nullptr, &decay, NmWgradKernel::kPanels);
    for (const int threads : {1, 2}) {
      const ScopedNumThreads t(threads);
      Matrix got(out, in);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(got.data()) % 64, 0u);
      nm_wgrad(dy, x.view(), got.view(), nullptr, &decay, NmWgradKernel::kPermute);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0) << threads;
    }
  }
}

TEST(NmWgrad, Errors) {
  const Matrix d = random_dy(16, 10, {2, 4}, 9);
  const CompressedNm dy = nm_compress(d.view(), {2, 4}, NmAxis::kCols);
  Matrix x(16, 20);
  Matrix w(10, 20);
  const CompressedNm rows_axis = nm_compress(Matrix(10, 16).view(), {2, 4}, NmAxis::kRows);
  testing::expect_error([&] { nm_wgrad(rows_axis, x.view(), w.view()); }, "got axis rows");
  Matrix x_bad(12, 20);
  testing::expect_error([&] { nm_wgrad(dy, x_bad.view(), w.view()); },
                        "x has 12 rows (tokens), dY has 16");
  Matrix w_bad(10, 21);
  testing::expect_error([&] { nm_wgrad(dy, x.view(), w_bad.view()); },
                        "dw is 10 x 21, expected [dY cols, x cols] = 10 x 20");
  Matrix big(16, 40);
  const ConstMatrixViewF xin(big.data(), 16, 20, 40);
  const MatrixViewF clash(big.data() + 20, 10, 20, 40);
  testing::expect_error([&] { nm_wgrad(dy, xin, clash); }, "overlaps");
  CompressedNm short_values = dy;
  short_values.values.resize(3);
  testing::expect_error([&] { nm_wgrad(short_values, x.view(), w.view()); }, "has 3 values");
  CompressedNm odd = nm_compress(Matrix(14, 4).view(), {2, 7}, NmAxis::kCols);
  odd.rows = 15;
  Matrix x15(15, 20);
  testing::expect_error([&] { nm_wgrad(odd, x15.view(), w.view()); }, "not a multiple of m (7)");
}

// nm_wgrad_check: empty for a call that runs, the thrown message for each refused one.
TEST(NmWgrad, CheckNamesWhatNmWgradWouldRefuse) {
  const Matrix d = random_dy(16, 10, {2, 4}, 9);
  const CompressedNm dy = nm_compress(d.view(), {2, 4}, NmAxis::kCols);
  Matrix x(16, 20);
  Matrix w(10, 20);
  EXPECT_EQ(nm_wgrad_check(dy, x.view(), w.view()), "");
  Matrix x_bad(12, 20);
  const std::string why = nm_wgrad_check(dy, x_bad.view(), w.view());
  EXPECT_NE(why.find("x has 12 rows (tokens), dY has 16"), std::string::npos);
  testing::expect_error([&] { nm_wgrad(dy, x_bad.view(), w.view()); }, why);
  const Matrix decay_w(10, 20);
  const std::vector<uint8_t> keep(10 * 20, 1);
  const NmWgradDecay decay{decay_w.view(), keep.data(), 19, 1e-4f};
  EXPECT_NE(nm_wgrad_check(dy, x.view(), w.view(), &decay).find("row stride >= in (20), got 19"),
            std::string::npos);
}

TEST(NmWgrad, IndexOutOfGroupIsRefused) {
  // 2:3 stores 2-bit indices: the value 3 would point into the next group (past the K-block at
  // the end). Release builds catch it while decoding; debug builds in nm_validate first.
  Matrix d(3, 1);
  d(0, 0) = 1.0f;
  CompressedNm dy = nm_compress(d.view(), {2, 3}, NmAxis::kCols);
  dy.indices[0] = 0x0F;  // slots 0 and 1: indices 3, 3
  Matrix x(3, 4);
  Matrix w(1, 4);
  for (NmWgradKernel kernel :
       {NmWgradKernel::kPanels, NmWgradKernel::kGemm, NmWgradKernel::kPermute}) {
    testing::expect_error([&] { nm_wgrad(dy, x.view(), w.view(), nullptr, nullptr, kernel); },
                          ">= m (3)");
  }
  // nm_gemm_pack refuses it too (the kGemm route packs dYᵀ with it).
  testing::expect_error([&] { nm_gemm_pack(dy); }, "row 0 slot 0 has in-group index 3 >= m (3)");
}

}  // namespace
}  // namespace nms

namespace nms {
namespace {

// nm_wgrad_pruned against its definition, grad_prune_compressed_into then nm_wgrad, bit for bit:
// on the fused routes (MVUE with m dividing 16, permute route, T % 16 == 0, out % 32 == 0: the
// pruning writes the lane form; 2:4 by its own kernel) and on every fallback (out or T off the
// multiples, narrow X under kAuto, an m not dividing 16, another route), with and without the
// decay, on 1-3 threads (row parts of whole chunks, 512-column strips); the fused routes' lane
// form also equals the one built from the compressed dY.
TEST(NmWgradPruned, SameBitsAsPruneThenWgrad) {
  struct Shape {
    int64_t tokens, in, out;
    NmPattern pattern;
    NmWgradKernel kernel;
  };
  const Shape shapes[] = {
      {64, 512, 64, {2, 4}, NmWgradKernel::kAuto},     // fused
      {208, 520, 576, {2, 4}, NmWgradKernel::kAuto},   // fused: a full strip and one of 64
      {48, 40, 96, {2, 4}, NmWgradKernel::kPermute},   // fused, explicit route
      {64, 512, 40, {2, 4}, NmWgradKernel::kAuto},     // out % 32 != 0
      {52, 512, 64, {2, 4}, NmWgradKernel::kAuto},     // T % 16 != 0
      {64, 100, 64, {2, 4}, NmWgradKernel::kAuto},     // narrow X: kernel A
      {64, 512, 64, {4, 8}, NmWgradKernel::kAuto},     // 4:8, fused
      {208, 520, 576, {8, 16}, NmWgradKernel::kAuto},  // 8:16, fused, two strips
      {48, 512, 96, {1, 2}, NmWgradKernel::kAuto},     // 1:2, fused
      {80, 512, 64, {3, 5}, NmWgradKernel::kAuto},     // 5 does not divide 16
      {64, 512, 64, {2, 4}, NmWgradKernel::kPanels},   // another route
  };
  uint64_t seed = 700;
  for (const Shape& s : shapes) {
    const Matrix dy = testing::random_matrix(s.tokens, s.out, seed++);
    const Matrix x = testing::random_matrix(s.tokens, s.in, seed++);
    const Matrix wmat = testing::random_matrix(s.out, s.in, seed++);
    std::vector<uint8_t> keep(static_cast<size_t>(s.out * s.in));
    for (size_t k = 0; k < keep.size(); ++k) keep[k] = static_cast<uint8_t>(k % 3 != 0);
    const GradPruneOptions prune{GradMethod::kMvue, s.pattern, NmAxis::kCols, seed++, 17};
    for (bool with_decay : {false, true}) {
      const NmWgradDecay decay{wmat.view(), keep.data(), s.in, 0.125f};
      const NmWgradDecay* d = with_decay ? &decay : nullptr;
      for (int threads : {1, 2, 3}) {
        std::ostringstream trace;
        trace << "T" << s.tokens << " " << s.in << " -> " << s.out << " " << s.pattern.to_string()
              << " threads " << threads << (with_decay ? " decay" : "");
        SCOPED_TRACE(trace.str());
        ScopedNumThreads t(threads);
        Matrix want(s.out, s.in);
        const CompressedNm c = grad_prune_compressed(dy.view(), prune);
        nm_wgrad(c, x.view(), want.view(), nullptr, d, s.kernel);
        Matrix got(s.out, s.in);
        NmWgradWorkspace ws;
        nm_wgrad_pruned(dy.view(), prune, x.view(), got.view(), &ws, d, s.kernel);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0);
        nm_wgrad_pruned(dy.view(), prune, x.view(), got.view(), &ws, d, s.kernel);  // reused
        ASSERT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()), 0);
      }
    }
  }
}

TEST(NmWgradPruned, FusedLaneFormEqualsTheOneFromTheCompressedDy) {
  // Both fused kernels (2:4's own, grad_prune_lanes24, and any n:m with m dividing 16,
  // grad_prune_lanes, 2:4 included) against the lane form built from the compressed dY, on
  // integer-valued gradients (ties, zeros: groups that keep fewer than n nonzeros fill with their
  // lowest positions), 1 and 2 threads.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "the fused route runs at AVX-512 only";
  const NmPattern patterns[] = {{2, 4}, {1, 2}, {1, 4}, {3, 4}, {4, 8}, {8, 16}, {5, 16}, {1, 1}};
  uint64_t seed = 41;
  for (const NmPattern p : patterns) {
    const Matrix dy = testing::random_integer_matrix(208, 576, 2, seed++);
    const GradPruneOptions prune{GradMethod::kMvue, p, NmAxis::kCols, 5, 6};
    ASSERT_TRUE(detail::grad_prune_lanes_applies(dy.view(), prune)) << p.to_string();
    const detail::NmGemmLaneLayout lay(576, 208, p.n, p.m);
    AlignedBuffer<float> want_values;
    AlignedBuffer<int32_t> want_lanes;
    detail::wgrad_lanes_from_compressed(grad_prune_compressed(dy.view(), prune), want_values,
                                        want_lanes);
    ASSERT_EQ(want_values.size(), lay.total());
    for (int threads : {1, 2}) {
      for (bool own24 : {false, true}) {
        if (own24 && !(p == NmPattern{2, 4})) continue;
        SCOPED_TRACE(p.to_string() + (own24 ? " grad_prune_lanes24" : " grad_prune_lanes") +
                     ", threads " + std::to_string(threads));
        ScopedNumThreads t(threads);
        AlignedBuffer<float> values(lay.total());
        AlignedBuffer<int32_t> lanes(lay.total());
        if (own24) {
          ASSERT_TRUE(detail::grad_prune_lanes24_applies(dy.view(), prune));
          detail::grad_prune_lanes24(dy.view(), prune, values.data(), lanes.data());
        } else {
          detail::grad_prune_lanes(dy.view(), prune, values.data(), lanes.data());
        }
        ASSERT_EQ(std::memcmp(values.data(), want_values.data(), sizeof(float) * lay.total()), 0);
        ASSERT_EQ(std::memcmp(lanes.data(), want_lanes.data(), sizeof(int32_t) * lay.total()), 0);
      }
    }
  }
}

TEST(NmWgradPruned, Errors) {
  Matrix dy = testing::random_matrix(64, 64, 3);
  dy(5, 7) = std::nanf("");
  const Matrix x = testing::random_matrix(64, 512, 5);
  Matrix dw(64, 512);
  const GradPruneOptions prune{GradMethod::kMvue, {2, 4}, NmAxis::kCols, 1, 2};
  testing::expect_error([&] { nm_wgrad_pruned(dy.view(), prune, x.view(), dw.view()); },
                        "(row 5, col 7)");
  const GradPruneOptions prune48{GradMethod::kMvue, {4, 8}, NmAxis::kCols, 1, 2};
  testing::expect_error([&] { nm_wgrad_pruned(dy.view(), prune48, x.view(), dw.view()); },
                        "(row 5, col 7)");
  const Matrix dy2 = testing::random_matrix(64, 64, 4);
  Matrix dw_bad(64, 500);
  testing::expect_error([&] { nm_wgrad_pruned(dy2.view(), prune, x.view(), dw_bad.view()); },
                        "expected [dY cols, x cols] = 64 x 512");
  GradPruneOptions rows = prune;
  rows.axis = NmAxis::kRows;
  testing::expect_error([&] { nm_wgrad_pruned(dy2.view(), rows, x.view(), dw.view()); },
                        "pruned along tokens");
}

}  // namespace
}  // namespace nms
