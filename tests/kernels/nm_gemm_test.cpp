// nm_gemm (Y = X · Aᵀ, A N:M along K) against a decompress + double-precision reference, every ISA
// level bit for bit against the scalar path, edge sizes around every tile edge, strides, threads,
// and errors.
//
// Tolerance: each output is a chain of k fused multiply-adds (k = kept terms of the row, padding
// zeros included), each rounding once, so |y − y_exact| <= γ_k Σ |x_i a_i| with
// γ_k = k u / (1 − k u), u = 2^-24 (Higham, Accuracy and Stability, §3.1); the double reference
// adds a negligible 2^-53 relative error.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm_case.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/nm_gemm_layout.h"
#include "kernels/same_operand.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/vectorwise.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

using Case = testing::GemmCase;
using testing::describe;

// Whether some tile of 2 or more real rows of an entries-form operand keeps the same columns.
bool reuses_columns(const NmGemmOperand& a) {
  const int64_t tiles = (a.rows + kNmGemmTileRows - 1) / kNmGemmTileRows;
  for (int64_t i = 0; i < a.shared.size(); ++i) {
    if (a.shared.data()[i] != 0 && a.rows - i % tiles * kNmGemmTileRows >= 2) return true;
  }
  return false;
}

// Runs operand `a` at every ISA level: each result within the bound of the double reference
// (ref, mag: Σ |x a|) and bitwise equal to `first` (set by the first run of the case).
void check_levels(const Case& c, ConstMatrixViewF x, const NmGemmOperand& a,
                  const std::vector<double>& ref, const std::vector<double>& mag, int64_t pad,
                  Matrix& first, const std::string& what) {
  const int64_t kept = c.depth / c.pattern.m * c.pattern.n;
  const double u = std::ldexp(1.0, -24);
  const double gamma = kept * u / (1.0 - kept * u);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa level(isa);
    SCOPED_TRACE(what + ", run at " + std::string(isa_name(isa)));
    Matrix ybuf(c.tokens, c.rows + pad);
    for (int64_t k = 0; k < ybuf.size(); ++k) ybuf.data()[k] = -7.0f;  // sentinel
    const MatrixViewF y(ybuf.data(), c.tokens, c.rows, c.rows + pad);
    nm_gemm(x, a, y);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        const auto i = static_cast<size_t>(t * c.rows + r);
        ASSERT_LE(std::fabs(y(t, r) - ref[i]), gamma * mag[i] + 1e-30)
            << "at (" << t << ", " << r << ")";
      }
      for (int64_t r = c.rows; r < c.rows + pad; ++r) {
        ASSERT_EQ(ybuf(t, r), -7.0f) << "wrote past the row at " << t << ", " << r;
      }
    }
    Matrix dense_y(c.tokens, c.rows);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t r = 0; r < c.rows; ++r) dense_y(t, r) = y(t, r);
    // With a bias: each element the product plus bias[r], one rounding (the same bits as adding
    // it afterwards), and nothing written past the rows.
    std::vector<float> bias(static_cast<size_t>(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) bias[static_cast<size_t>(r)] = 0.25f * float(r % 7) - 0.6f;
    for (int64_t k = 0; k < ybuf.size(); ++k) ybuf.data()[k] = -7.0f;
    nm_gemm(x, a, y, bias.data());
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        const float want = dense_y(t, r) + bias[static_cast<size_t>(r)];
        ASSERT_EQ(std::memcmp(&y(t, r), &want, sizeof(float)), 0)
            << "bias at (" << t << ", " << r << "): " << y(t, r) << " vs " << want;
      }
      for (int64_t r = c.rows; r < c.rows + pad; ++r) ASSERT_EQ(ybuf(t, r), -7.0f);
    }
    if (first.size() == 0) {
      first = std::move(dense_y);
    } else {
      ASSERT_EQ(std::memcmp(first.data(), dense_y.data(), sizeof(float) * first.size()), 0)
          << "differs from the first run (scalar)";
    }
  }
}

// Runs one case on the N:M matrix d (A = d for kRows, dᵀ for kCols) at every ISA level; checks
// the tolerance and bitwise equality across levels.
// Sets the broadcast kernel's panel pairing for a scope (nm_gemm_avx512.h).
class ScopedPanelPairs {
 public:
  explicit ScopedPanelPairs(bool pairs) { detail::set_nm_gemm_panel_pairs_override(pairs ? 1 : 0); }
  ~ScopedPanelPairs() { detail::set_nm_gemm_panel_pairs_override(-1); }
  ScopedPanelPairs(const ScopedPanelPairs&) = delete;
  ScopedPanelPairs& operator=(const ScopedPanelPairs&) = delete;
};

constexpr std::array<std::pair<NmGemmKernel, bool>, 3> kKernelModes{
    {{NmGemmKernel::kBroadcast, true},
     {NmGemmKernel::kBroadcast, false},
     {NmGemmKernel::kPermute, true}}};

void check_matrix(const Case& c, const Matrix& d, uint64_t seed, int64_t pad = 0) {
  SCOPED_TRACE(describe(c));
  const bool fwd = c.axis == NmAxis::kRows;
  const CompressedNm comp = nm_compress(d.view(), c.pattern, c.axis);
  Matrix xbuf = testing::random_matrix(c.tokens, c.depth + pad, seed + 1);
  const ConstMatrixViewF x(xbuf.data(), c.tokens, c.depth, c.depth + pad);
  std::vector<double> ref(static_cast<size_t>(c.tokens * c.rows));  // the double reference
  std::vector<double> mag(ref.size());                              // and Σ |x a|
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double sum = 0.0;
      double abs_sum = 0.0;
      for (int64_t k = 0; k < c.depth; ++k) {
        const double av = fwd ? d(r, k) : d(k, r);
        sum += double{x(t, k)} * av;
        abs_sum += std::fabs(double{x(t, k)} * av);
      }
      ref[static_cast<size_t>(t * c.rows + r)] = sum;
      mag[static_cast<size_t>(t * c.rows + r)] = abs_sum;
    }
  }
  Matrix first;
  bool reuse = false;  // from the broadcast packing, the first
  // Both AVX-512 kernels (an operand packed under `permute` has the lane form: the permute kernel
  // at the AVX-512 level, its scalar path below), packed at every level (depth blocks of 128
  // columns, 64 at AVX2; the lanes at AVX-512 under permute), each run at every level.
  // The broadcast kernel runs with its token panels in pairs and one at a time
  // (nm_gemm_panel_pairs; the same bits either way).
  for (const auto& [kernel, pairs] : kKernelModes) {
    ScopedNmGemmKernel scoped_kernel(kernel);
    const ScopedPanelPairs scoped_pairs(pairs);
    SCOPED_TRACE(pairs ? "panel pairs" : "single panels");
    for (Isa pack_isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (pack_isa > isa_supported()) continue;
      NmGemmOperand a;
      {
        ScopedIsa packing(pack_isa);
        a = nm_gemm_pack(comp);
      }
      ASSERT_EQ(a.rows, c.rows);
      ASSERT_EQ(a.depth, c.depth);
      const int64_t cap = pack_isa == Isa::kAvx2 ? kNmGemmDepthBlockAvx2 : kNmGemmMaxDepthBlock;
      ASSERT_EQ(a.depth_block, cap / c.pattern.m * c.pattern.m);
      // One form: the lanes for permute at AVX-512 (m | 16, no tile reusing its columns).
      if (kernel == NmGemmKernel::kBroadcast && pack_isa == Isa::kScalar) {
        reuse = reuses_columns(a);
      }
      const bool lanes = kernel == NmGemmKernel::kPermute && pack_isa == Isa::kAvx512 &&
                         16 % c.pattern.m == 0 && !reuse;
      ASSERT_EQ(a.lane_values.size() > 0, lanes) << nm_gemm_kernel_name(kernel);
      ASSERT_EQ(a.packed.size() > 0, !lanes) << nm_gemm_kernel_name(kernel);
      check_levels(c, x, a, ref, mag, pad, first,
                   std::string(nm_gemm_kernel_name(kernel)) + " packed at " +
                       std::string(isa_name(pack_isa)));
    }
  }
}

void check_case(const Case& c, uint64_t seed, int64_t pad = 0) {
  const bool fwd = c.axis == NmAxis::kRows;
  check_matrix(c,
               fwd ? testing::random_nm(c.rows, c.depth, c.pattern, c.axis, seed)
                   : testing::random_nm(c.depth, c.rows, c.pattern, c.axis, seed),
               seed, pad);
}

TEST(NmGemm, PatternsOnTileEdges) {
  // Tiles: 6 rows of A, 64 tokens per panel, 16 x 16 transposes, depth blocks of the largest
  // multiple of m <= the packing level's cap (nm_gemm_layout.h).
  const NmPattern patterns[] = {{2, 4}, {1, 4},   {1, 2}, {4, 8},   {8, 16},
                                {3, 8}, {16, 16}, {2, 3}, {16, 32}, {5, 12}};
  uint64_t seed = 1;
  for (NmPattern p : patterns) {
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      const int64_t depth = p.m * (48 / p.m + 1);
      for (int64_t tokens : {1, 15, 16, 17, 63, 64, 65, 131}) {
        for (int64_t rows : {1, 5, 6, 7, 16, 17, 33}) {
          check_case({tokens, depth, rows, p, axis}, seed++);
        }
      }
      // Around one, two and three depth blocks of either size (check_matrix packs at every
      // level).
      for (const int64_t cap : {kNmGemmDepthBlockAvx2, kNmGemmMaxDepthBlock}) {
        const int64_t kc = cap / p.m * p.m;
        for (int64_t k : {kc - p.m, kc, kc + p.m, 2 * kc, 3 * kc + p.m}) {
          check_case({19, k, 13, p, axis}, seed++, /*pad=*/3);
        }
      }
    }
  }
}

TEST(NmGemm, LongRows) {
  check_case({70, 1040, 40, {2, 4}, NmAxis::kRows}, 5);
  check_case({10, 1552, 65, {8, 16}, NmAxis::kCols}, 6, 5);
}

TEST(NmGemm, PermuteKernelBlockingEdges) {
  // The permute kernel's blocking (nm_gemm_lanes.h): 32-row blocks (a partial last one), 16-column
  // chunks (a partial last one), K blocks of 128 chunks (two and three of them, so Y is stored and
  // reloaded mid-chain), items of 256 tokens (a partial one, and token tiles of 8 with a tail), and
  // row parts when the token blocks are fewer than twice the threads. check_matrix runs both
  // kernels at every level against the scalar path, bit for bit.
  uint64_t seed = 900;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ScopedNumThreads scoped(threads);
    check_case({300, 2068, 45, {2, 4}, NmAxis::kRows}, seed++, /*pad=*/3);
    check_case({37, 4112, 70, {8, 16}, NmAxis::kCols}, seed++);
    check_case({9, 4100, 33, {1, 4}, NmAxis::kRows}, seed++, 1);
    check_case({520, 40, 97, {1, 2}, NmAxis::kRows}, seed++);
  }
}

// Sets the permute driver's streamed Y and hybrid super-tiles for a scope (nm_gemm_lanes.h).
class ScopedLaneDriver {
 public:
  ScopedLaneDriver(bool stream, bool hybrid) {
    detail::set_nm_gemm_lanes_stream_y_override(stream);
    detail::set_nm_gemm_lanes_hybrid_override(hybrid);
  }
  ~ScopedLaneDriver() {
    detail::set_nm_gemm_lanes_stream_y_override(-1);
    detail::set_nm_gemm_lanes_hybrid_override(-1);
  }
  ScopedLaneDriver(const ScopedLaneDriver&) = delete;
  ScopedLaneDriver& operator=(const ScopedLaneDriver&) = delete;
};

TEST(NmGemm, PermuteTilesAndHybridSuperTilesGiveTheScalarBits) {
  // Row-major Y on the permute-only tiles and on hybrid super-tiles (64 tokens where a chunk holds
  // 8 or more slots, 128 at 1:4; their last 32 tokens read from panels the call packs per K block,
  // staged and transposed back into Y, the others' rows of Y read and written in place), each with
  // plain and streamed stores (a large Y's last K
  // block: whole row blocks only, the bias added before the store; forced on here at small
  // sizes). Shapes: one super-tile and a token tail, several per work item of 256 and a second
  // item, a super-tile short of a token; partial chunks and row blocks (16 real rows in the last:
  // 80), one and two K blocks; row strides of X and Y wider than their rows; 1 and 2 threads,
  // with and without the bias. Every result bit for bit the scalar path's, and Y's padding
  // untouched.
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  ScopedNmGemmKernel permute(NmGemmKernel::kPermute);
  struct Shape {
    int64_t tokens, depth, rows, ldx, ldy;
    NmPattern pattern;
  };
  uint64_t seed = 1300;
  for (const Shape& s : {Shape{65, 40, 45, 44, 48, {2, 4}}, Shape{389, 2068, 80, 2068, 96, {2, 4}},
                         Shape{37, 2096, 80, 2096, 80, {2, 4}}, Shape{300, 48, 64, 48, 96, {1, 4}},
                         Shape{200, 100, 33, 103, 33, {1, 4}}, Shape{63, 64, 32, 64, 32, {2, 4}},
                         Shape{129, 2096, 17, 2100, 32, {8, 16}}, Shape{64, 48, 96, 50, 96, {1, 2}},
                         Shape{300, 64, 50, 64, 64, {3, 4}}, Shape{19, 160, 40, 160, 48, {4, 8}}}) {
    SCOPED_TRACE(std::to_string(s.tokens) + " x " + std::to_string(s.depth) + " -> " +
                 std::to_string(s.rows) + " " + s.pattern.to_string() + ", ld " +
                 std::to_string(s.ldx) + " / " + std::to_string(s.ldy));
    const Matrix d = testing::random_nm(s.rows, s.depth, s.pattern, NmAxis::kRows, seed++);
    const NmGemmOperand a = nm_gemm_pack(nm_compress(d.view(), s.pattern));
    ASSERT_GT(a.lane_values.size(), 0) << "the permute kernel's operand";
    const Matrix xs = testing::random_matrix(s.tokens, s.ldx, seed++);
    const ConstMatrixViewF x(xs.data(), s.tokens, s.depth, s.ldx);
    std::vector<float> bias(static_cast<size_t>(s.rows));
    for (size_t r = 0; r < bias.size(); ++r) bias[r] = 0.25f * float(r % 7) - 0.5f;
    for (const float* b :
         {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
      SCOPED_TRACE(b != nullptr ? "with bias" : "no bias");
      Matrix want(s.tokens, s.ldy);
      {
        ScopedIsa scalar(Isa::kScalar);
        nm_gemm(x, a, MatrixViewF(want.data(), s.tokens, s.rows, s.ldy), b);
      }
      for (int threads : {1, 2}) {
        for (bool hybrid : {false, true}) {
          for (bool stream : {false, true}) {
            SCOPED_TRACE(std::string(hybrid ? "hybrid" : "permute-only") + ", " +
                         (stream ? "streamed" : "plain") + ", threads " + std::to_string(threads));
            ScopedNumThreads scoped_threads(threads);
            const ScopedLaneDriver driver(stream, hybrid);
            Matrix y(s.tokens, s.ldy);
            std::fill(y.data(), y.data() + y.size(), -7.0f);
            nm_gemm(x, a, MatrixViewF(y.data(), s.tokens, s.rows, s.ldy), b);
            for (int64_t t = 0; t < s.tokens; ++t) {
              ASSERT_EQ(std::memcmp(&y(t, 0), &want(t, 0), sizeof(float) * s.rows), 0) << t;
              for (int64_t r = s.rows; r < s.ldy; ++r) {
                ASSERT_EQ(y(t, r), -7.0f) << t << ", " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST(NmGemm, KernelNames) {
  for (NmGemmKernel k : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
    EXPECT_EQ(nm_gemm_kernel_from_name(nm_gemm_kernel_name(k)), k);
  }
  EXPECT_FALSE(nm_gemm_kernel_from_name("permutes").has_value());
  {
    ScopedNmGemmKernel outer(NmGemmKernel::kPermute);
    {
      ScopedNmGemmKernel inner(NmGemmKernel::kBroadcast);
      EXPECT_EQ(nm_gemm_kernel_active(), NmGemmKernel::kBroadcast);
    }
    EXPECT_EQ(nm_gemm_kernel_active(), NmGemmKernel::kPermute);
    {
      ScopedIsa scalar(Isa::kScalar);  // below AVX-512 the operands run the broadcast scheme
      EXPECT_EQ(nm_gemm_kernel_in_use(), NmGemmKernel::kBroadcast);
    }
    if (isa_supported() == Isa::kAvx512) {
      ScopedIsa avx512(Isa::kAvx512);
      EXPECT_EQ(nm_gemm_kernel_in_use(), NmGemmKernel::kPermute);
    }
  }
}

TEST(NmGemm, BlockingEdges) {
  // Work items are (row chunk of A, group of panels), Xᵀ packed a slab of panels at a time
  // (nm_gemm_layout.h): row chunks that do not divide R, groups that do not divide the panels,
  // T < 64 with several chunks, several slabs, at 1, 2 and 3 threads (the chunk count follows the
  // thread count). Every level is checked bit for bit against the scalar path, whose rows do not
  // depend on the blocking.
  const int64_t chunk_rows = kNmGemmChunkRows;
  const int64_t group_tokens = kNmGemmGroupPanels * kNmGemmPanel;
  // Depth whose packed Xᵀ panel alone fills a slab's budget: one group per slab.
  const int64_t wide = kNmGemmSlabFloats / kNmGemmGroupPanels / kNmGemmPanel;
  uint64_t seed = 700;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    ScopedNumThreads scoped(threads);
    // The blocking does not depend on the axis (only the packing does): the large cases once.
    check_case({group_tokens + 2 * kNmGemmPanel + 3, 136, chunk_rows + 100, {2, 4}, NmAxis::kRows},
               seed++, /*pad=*/3);
    check_case({group_tokens + 1, 80, 4, {8, 16}, NmAxis::kCols}, seed++);
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      check_case({5, 136, chunk_rows + 7, {2, 4}, axis}, seed++);
      check_case({63, 264, chunk_rows + 48, {1, 4}, axis}, seed++, 1);
    }
    // One row chunk: each item packs its own panels (no shared workspace).
    check_case({2 * group_tokens + 70, 136, 13, {2, 4}, NmAxis::kRows}, seed++, 2);
  }
  // Two row chunks sharing a workspace of 5 panels (9 panels: groups of 5 and 4, the workspace
  // holds one group of this depth), so two slabs; one thread (a slab holds a group per thread).
  ScopedNumThreads one(1);
  check_case({group_tokens + 8, wide, chunk_rows + 7, {1, 4}, NmAxis::kRows}, seed++, 1);
}

TEST(NmGemm, SharedColumnsTakeTheReusePathWithTheSameResults) {
  // A vector-wise mask with blocks of 12 rows: every tile of 6 rows keeps the same columns in
  // every depth block, so the kernel loads each panel row once per tile (nm_gemm.h); results are
  // still bitwise the scalar path's. Rows 37 (a padding row in the last tile) and 1:4, 2:4, 8:16.
  uint64_t seed = 500;
  for (NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{8, 16}}) {
    Matrix w = testing::random_matrix(37, 192, seed++);
    Matrix scores(37, 192);
    for (int64_t k = 0; k < w.size(); ++k) scores.data()[k] = std::fabs(w.data()[k]);
    const BitMask mask = mask_nm_vectorwise(scores.view(), p, 12);
    apply_mask(w.view(), mask);
    // Under either kernel and by either packer: the entries form, every tile shared (the reuse
    // path, never the lanes).
    for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
      ScopedNmGemmKernel scoped(kernel);
      const NmGemmOperand a = nm_gemm_pack(nm_compress(w.view(), p));
      for (int64_t k = 0; k < a.shared.size(); ++k) ASSERT_EQ(a.shared.data()[k], 1) << k;
      ASSERT_EQ(a.lane_values.size(), 0);
      NmGemmOperand masked;
      nm_gemm_pack_masked_into(w.view(), mask, p, masked);
      testing::expect_same_operand(masked, a);
    }
    check_matrix({70, 192, 37, p, NmAxis::kRows}, w, seed++, 2);
  }
  {  // Several row chunks and panel groups.
    const NmPattern p{2, 4};
    const int64_t rows = kNmGemmChunkRows + 60;
    Matrix w = testing::random_matrix(rows, 136, seed++);
    Matrix scores(rows, 136);
    for (int64_t k = 0; k < w.size(); ++k) scores.data()[k] = std::fabs(w.data()[k]);
    apply_mask(w.view(), mask_nm_vectorwise(scores.view(), p, 12));
    check_matrix({kNmGemmGroupPanels * kNmGemmPanel + 70, 136, rows, p, NmAxis::kRows}, w, seed++);
  }
  // A per-row mask of random data shares nothing.
  const Matrix d = testing::random_nm(12, 64, {2, 4}, NmAxis::kRows, 9);
  const NmGemmOperand b = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
  for (int64_t k = 0; k < b.shared.size(); ++k) EXPECT_EQ(b.shared.data()[k], 0) << k;
}

TEST(NmGemm, SameBitsForOneAndTwoThreads) {
  for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
    ScopedNmGemmKernel scoped(kernel);
    const Matrix d = testing::random_nm(100, 272, {2, 4}, NmAxis::kRows, 3);
    const NmGemmOperand a = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
    const Matrix x = testing::random_matrix(300, 272, 4);
    Matrix y1(300, 100);
    Matrix y2(300, 100);
    {
      ScopedNumThreads t(1);
      nm_gemm(x.view(), a, y1.view());
    }
    {
      ScopedNumThreads t(2);
      nm_gemm(x.view(), a, y2.view());
    }
    EXPECT_EQ(std::memcmp(y1.data(), y2.data(), sizeof(float) * y1.size()), 0)
        << nm_gemm_kernel_name(kernel);
  }
}

TEST(NmGemm, ScratchBytes) {
  const Matrix d = testing::random_nm(100, 256, {2, 4}, NmAxis::kRows, 7);
  ScopedNumThreads threads(1);
  if (isa_supported() == Isa::kAvx512) {  // the permute kernel keeps no scratch
    ScopedNmGemmKernel permute(NmGemmKernel::kPermute);
    const NmGemmOperand lanes = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
    ASSERT_GT(lanes.lane_values.size(), 0);
    EXPECT_EQ(nm_gemm_scratch_bytes(lanes), 0);
  }
  ScopedNmGemmKernel broadcast(NmGemmKernel::kBroadcast);
  const NmGemmOperand a = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
  {
    ScopedIsa level(Isa::kScalar);
    EXPECT_EQ(nm_gemm_scratch_bytes(a), 0);
  }
  if (isa_supported() >= Isa::kAvx2) {
    // One row chunk, so no shared Xᵀ workspace: a worker's output blocks for a group of panels x
    // 17 tiles (one chunk of 3 units of 8 tiles: 144 rows) x 64 floats, and its own Xᵀ panels of
    // one depth block.
    ScopedIsa level(Isa::kAvx2);
    EXPECT_EQ(nm_gemm_scratch_bytes(a),
              4 * kNmGemmGroupPanels * (144 + a.depth_block) * kNmGemmPanel);
  }
  if (isa_supported() >= Isa::kAvx2) {
    // Two row chunks: a worker's output blocks (a group of panels x kNmGemmChunkRows x 64
    // floats), plus the calling thread's Xᵀ workspace shared by the chunks: the panels of depth
    // 256 (whole depth blocks of either size) that kNmGemmSlabFloats holds, in whole groups.
    const Matrix d2 = testing::random_nm(2 * kNmGemmChunkRows, 256, {2, 4}, NmAxis::kRows, 8);
    const NmGemmOperand a2 = nm_gemm_pack(nm_compress(d2.view(), {2, 4}));
    ScopedIsa level(Isa::kAvx2);
    const int64_t panel = 256 * kNmGemmPanel;
    const int64_t slab = kNmGemmSlabFloats / (kNmGemmGroupPanels * panel) * kNmGemmGroupPanels;
    EXPECT_EQ(nm_gemm_scratch_bytes(a2),
              4 * (kNmGemmGroupPanels * kNmGemmChunkRows * kNmGemmPanel + slab * panel));
  }
}

TEST(NmGemm, PackIntoReusesBuffers) {
  const Matrix d = testing::random_nm(64, 64, {2, 4}, NmAxis::kRows, 8);
  const BitMask mask = mask_nm_magnitude(d.view(), {2, 4});
  for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
    ScopedNmGemmKernel scoped(kernel);
    NmGemmOperand a;
    nm_gemm_pack_masked_into(d.view(), mask, {2, 4}, a);
    // The buffer of the operand's form (the lanes for permute on an AVX-512 CPU).
    const auto form = [&] {
      return a.lane_values.size() > 0 ? a.lane_values.data() : a.packed.data();
    };
    const float* v = form();
    ASSERT_NE(v, nullptr);
    nm_gemm_pack_masked_into(d.view(), mask, {2, 4}, a);
    EXPECT_EQ(v, form()) << nm_gemm_kernel_name(kernel);
  }
}

TEST(NmGemm, Errors) {
  const Matrix d = testing::random_nm(32, 64, {2, 4}, NmAxis::kRows, 9);
  const NmGemmOperand a = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
  Matrix x(8, 60);
  Matrix y(8, 32);
  testing::expect_error([&] { nm_gemm(x.view(), a, y.view()); }, "x has 60 columns");
  Matrix x2(8, 64);
  Matrix y2(7, 32);
  testing::expect_error([&] { nm_gemm(x2.view(), a, y2.view()); }, "expected 8 x 32");
  // The overlap test is on address ranges: views into the same rows of one buffer are refused
  // even when their columns are disjoint.
  Matrix big(8, 96);
  const ConstMatrixViewF xin(big.data(), 8, 64, 96);
  const MatrixViewF clash(big.data() + 64, 8, 32, 96);
  testing::expect_error([&] { nm_gemm(xin, a, clash); }, "overlaps");
  Matrix y3(8, 32);
  testing::expect_error([&] { nm_gemm(x2.view(), a, y3.view(), y3.data() + 40); },
                        "bias lies inside y");
  NmGemmOperand empty;
  empty.rows = 32;
  empty.depth = 64;
  empty.pattern = {2, 4};
  testing::expect_error([&] { nm_gemm(x2.view(), empty, y.view()); }, "not packed");
}

// nm_gemm_check: empty for a call that runs, the thrown message for each refused one.
TEST(NmGemm, CheckNamesWhatNmGemmWouldRefuse) {
  const Matrix d = testing::random_nm(32, 64, {2, 4}, NmAxis::kRows, 9);
  const NmGemmOperand a = nm_gemm_pack(nm_compress(d.view(), {2, 4}));
  Matrix x(8, 64);
  Matrix y(8, 32);
  EXPECT_EQ(nm_gemm_check(x.view(), a, y.view()), "");
  Matrix x_bad(8, 60);
  EXPECT_NE(nm_gemm_check(x_bad.view(), a, y.view()).find("x has 60 columns"), std::string::npos);
  Matrix y_bad(7, 32);
  EXPECT_NE(nm_gemm_check(x.view(), a, y_bad.view()).find("expected 8 x 32"), std::string::npos);
  NmGemmOperand empty;
  empty.rows = 32;
  empty.depth = 64;
  empty.pattern = {2, 4};
  const std::string why = nm_gemm_check(x.view(), empty, y.view());
  EXPECT_NE(why.find("not packed"), std::string::npos);
  testing::expect_error([&] { nm_gemm(x.view(), empty, y.view()); }, why);
}

}  // namespace
}  // namespace nms

namespace nms {
namespace {

// nm_gemm_pack_masked_into equals nm_gemm_pack(nm_compress_masked(...)) entry for entry, on tile
// and depth-block edges, with groups that keep fewer than n (padding) and strided input.
void expect_pack_masked_equals_pack(NmPattern p, int64_t rows, int64_t groups) {
  SCOPED_TRACE(::testing::Message()
               << p.to_string() << " " << rows << " rows, " << groups << " groups");
  const int64_t k = groups * p.m;
  std::vector<float> a(static_cast<size_t>(rows * (k + 5)));
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>((i * 2654435761u) % 1000) - 500.0f;
  const ConstMatrixViewF av(a.data(), rows, k, k + 5);
  BitMask mask(rows, k);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int keep = static_cast<int>((r + g) % (p.n + 1));  // 0..n kept
      for (int j = 0; j < keep; ++j) mask.set(r, g * p.m + (j * 3 + r) % p.m);
    }
  }
  // (j * 3 + r) % m may repeat: the set then keeps fewer, which is still valid. Both forms: the
  // masked route packs the lanes straight from the mask, the compressed one from its entries.
  for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
    SCOPED_TRACE(std::string(nm_gemm_kernel_name(kernel)));
    ScopedNmGemmKernel scoped(kernel);
    const NmGemmOperand want = nm_gemm_pack(nm_compress_masked(av, mask, p));
    NmGemmOperand got;
    nm_gemm_pack_masked_into(av, mask, p, got);
    testing::expect_same_operand(got, want);
  }
}

TEST(NmGemmPackMasked, EqualsPackOfTheCompressedMatrix) {
  for (NmPattern p : {NmPattern{1, 2}, NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{4, 8},
                      NmPattern{3, 7}, NmPattern{16, 32}, NmPattern{8, 64}}) {
    for (int64_t rows : {1, 5, 6, 7, 13}) {
      for (int64_t groups : {1, 3, 40}) expect_pack_masked_equals_pack(p, rows, groups);
    }
  }
}

// Operands of 8 MB and more are built run by run in a buffer and streamed out: a padded last tile
// and a partial last depth block on that path too.
TEST(NmGemmPackMasked, LargeOperandEqualsPackOfTheCompressedMatrix) {
  expect_pack_masked_equals_pack({2, 4}, 1031, 520);
  expect_pack_masked_equals_pack({3, 7}, 601, 700);
}

// 2:4 runs take the AVX-512 packer (vcompressps + scatter), groups keeping fewer than 2 padded as
// the scalar packer pads them (a group keeping 0 and one keeping 1 below); a run with a group
// keeping 3 goes back to the scalar packer, which names it. Every level must give the entries of
// the compressed route, on tile and depth-block edges.
TEST(NmGemmPackMasked, TwoOfFourRunsAtEveryLevel) {
  uint64_t seed = 500;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (int64_t rows : {1, 5, 6, 7, 13, 601}) {
      for (int64_t k : {4, 12, 16, 20, 124, 128, 132, 260, 4100}) {
        for (int variant = 0; variant < 3; ++variant) {  // exact, fewer, one group keeps 3
          SCOPED_TRACE(::testing::Message()
                       << isa_name(isa) << " " << rows << " x " << k << " variant " << variant);
          const Matrix a = testing::random_matrix(rows, k, seed++);
          BitMask mask = mask_nm_magnitude(a.view(), {2, 4});
          const int64_t r = rows - 1;
          const int64_t c0 = (k / 4 / 2) * 4;  // the last row's middle group
          if (variant == 1) {
            for (int64_t c = 0; c < 4; ++c) mask.set(r, c, false);  // its first group keeps 0
            for (int64_t c = c0, seen = 0; c < c0 + 4; ++c) {       // the middle one keeps 1
              if (mask.get(r, c) && seen++ > 0) mask.set(r, c, false);
            }
          }
          if (variant == 2) {
            for (int64_t c = c0; c < c0 + 4; ++c) mask.set(r, c, c < c0 + 3);
            for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
              ScopedNmGemmKernel scoped_kernel(kernel);
              NmGemmOperand op;
              testing::expect_error(
                  [&] {
                    nm_gemm_pack_masked_into(a.view(), mask, {2, 4}, op);
                  },
                  "keeps 3 > n (2)");
            }
            continue;
          }
          for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
            ScopedNmGemmKernel scoped_kernel(kernel);
            const NmGemmOperand want = nm_gemm_pack(nm_compress_masked(a.view(), mask, {2, 4}));
            NmGemmOperand got;
            nm_gemm_pack_masked_into(a.view(), mask, {2, 4}, got);
            testing::expect_same_operand(got, want);
          }
        }
      }
    }
  }
}

// A repack from the mask the lane form came from rewrites the values only (the lanes depend on
// the mask alone: NmGemmOperand::lane_mask); any other mask, a failed pack or a pack from a
// compression packs both again. Each result equals a fresh pack of the same matrix and mask, at
// every level and kernel, on lane-block and chunk edges, and on the streamed (>= 8 MB) path.
TEST(NmGemmPackMasked, RepackFromTheSameMaskRewritesTheValues) {
  uint64_t seed = 700;
  const auto thinned_mask = [](const Matrix& a, NmPattern p, int64_t every) {
    BitMask mask = mask_nm_magnitude(a.view(), p);
    for (int64_t r = 0; r < mask.rows(); r += every) mask.set(r, 0, false);
    return mask;
  };
  const auto fresh = [](const Matrix& a, const BitMask& mask, NmPattern p) {
    NmGemmOperand op;
    nm_gemm_pack_masked_into(a.view(), mask, p, op);
    return op;
  };
  // The mask with row 0's first group emptied (or, if it was empty, keeping column 0): another.
  const auto changed = [](const BitMask& mask, NmPattern p) {
    BitMask other = mask;
    for (int64_t c = 0; c < p.m; ++c) other.set(0, c, false);
    if (other == mask) other.set(0, 0);
    return other;
  };
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
      ScopedNmGemmKernel scoped_kernel(kernel);
      for (NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{4, 8}, NmPattern{3, 7}}) {
        for (auto [rows, groups] :
             {std::pair<int64_t, int64_t>{1, 1}, {33, 5}, {70, 37}, {1031, 520}}) {
          if (rows == 1031 && p != NmPattern{2, 4}) continue;
          SCOPED_TRACE(::testing::Message()
                       << isa_name(isa) << " " << nm_gemm_kernel_name(kernel) << " "
                       << p.to_string() << " " << rows << " x " << groups * p.m);
          const Matrix a1 = testing::random_matrix(rows, groups * p.m, seed++);
          const Matrix a2 = testing::random_matrix(rows, groups * p.m, seed++);
          const BitMask mask = thinned_mask(a1, p, 3);
          NmGemmOperand op;
          nm_gemm_pack_masked_into(a1.view(), mask, p, op);
          const bool lanes = !op.lane_values.empty();
          EXPECT_EQ(op.lane_mask, lanes ? mask : BitMask());
          // The same mask, new values: the lanes stay as they are (poisoned here to show it).
          if (lanes) std::fill_n(op.lane_index.data(), op.lane_index.size(), 99);
          nm_gemm_pack_masked_into(a2.view(), mask, p, op);
          testing::expect_same_buffer(op.lane_values, fresh(a2, mask, p).lane_values, "values");
          if (lanes) {
            EXPECT_EQ(op.lane_index.data()[0], 99);
          }
          // Another mask: both again.
          const BitMask other = changed(mask, p);
          nm_gemm_pack_masked_into(a2.view(), other, p, op);
          testing::expect_same_operand(op, fresh(a2, other, p));
          EXPECT_EQ(op.lane_mask, lanes ? other : BitMask());
          // A pack from a compression, then the masked pack again: no stale lanes.
          nm_gemm_pack_into(nm_compress_masked(a1.view(), mask, p), op);
          EXPECT_EQ(op.lane_mask, BitMask());
          nm_gemm_pack_masked_into(a2.view(), other, p, op);
          testing::expect_same_operand(op, fresh(a2, other, p));
        }
      }
    }
  }
}

// A failed pack (a group keeping more than n) leaves no lane mask behind: the next pack from the
// previous mask packs both again.
TEST(NmGemmPackMasked, FailedPackForgetsTheLaneMask) {
  if (isa_supported() < Isa::kAvx512) GTEST_SKIP() << "the lane form is packed at AVX-512 only";
  ScopedIsa scoped(Isa::kAvx512);
  ScopedNmGemmKernel kernel(NmGemmKernel::kPermute);
  const Matrix a1 = testing::random_matrix(40, 64, 1);
  const Matrix a2 = testing::random_matrix(40, 64, 2);
  const BitMask mask = mask_nm_magnitude(a1.view(), {2, 4});
  NmGemmOperand op;
  nm_gemm_pack_masked_into(a1.view(), mask, {2, 4}, op);
  ASSERT_EQ(op.lane_mask, mask);
  BitMask overfull = mask;
  for (int64_t c = 0; c < 3; ++c) overfull.set(39, 60 + c);
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_into(a1.view(), overfull, {2, 4}, op);
      },
      "keeps 3 > n (2)");
  EXPECT_EQ(op.lane_mask, BitMask());
  nm_gemm_pack_masked_into(a2.view(), mask, {2, 4}, op);
  NmGemmOperand want;
  nm_gemm_pack_masked_into(a2.view(), mask, {2, 4}, want);
  testing::expect_same_operand(op, want);
}

TEST(NmGemmPackMasked, Errors) {
  std::vector<float> a(16, 1.0f);
  BitMask mask(2, 8);
  mask.set(1, 4);
  mask.set(1, 5);
  mask.set(1, 6);
  NmGemmOperand op;
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_into(ConstMatrixViewF(a.data(), 2, 8), mask, {2, 4}, op);
      },
      "row 1 group 1 (columns 4..7) keeps 3 > n (2)");
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_into(ConstMatrixViewF(a.data(), 2, 8), BitMask(2, 4), {2, 4}, op);
      },
      "mask shape (2 x 4) differs from the matrix (2 x 8)");
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_into(ConstMatrixViewF(a.data(), 2, 8), mask, {2, 3}, op);
      },
      "m (3) does not divide the grouped axis (8)");
}

}  // namespace
}  // namespace nms
