// The GPU threads' bodies (src/cuda/kernel_bodies.h) run on the host over every thread index, as
// the launches in src/cuda/mask.cu and mvue.cu run them, against the CPU library. This needs no
// GPU and no CUDA toolkit, so it runs in every build: what the GPU computes is tested here, and
// tests/cuda/cuda_test.cpp adds the launches and copies where a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/kernel_bodies.h"
#include "cuda_test_shapes.h"
#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "testing/random.h"

namespace nms {
namespace {

using cuda::detail::TileCounters;
using cuda::detail::TileSolver;

template <int kMaxM>
void tiles_with(const Matrix& s, NmPattern p, TileSolver solver, std::vector<uint64_t>& bits,
                TileCounters& counters) {
  const int64_t tiles_per_row = s.cols() / p.m;
  const int64_t tiles = (s.rows() / p.m) * tiles_per_row;
  for (int64_t t = 0; t < tiles; ++t) {
    if (solver == TileSolver::kExact) {
      cuda::detail::transposable_tile_thread<kMaxM, false>(
          t, s.data(), s.cols(), p.n, p.m, tiles_per_row, solver, bits.data(), &counters);
    } else if constexpr (kMaxM <= cuda::detail::kMaxTileGreedy) {
      cuda::detail::transposable_tile_thread<kMaxM, true>(
          t, s.data(), s.cols(), p.n, p.m, tiles_per_row, solver, bits.data(), &counters);
    }
  }
}

// launch_transposable on the host: the same template dispatch on m, then the word assembly.
BitMask emulate_transposable(const Matrix& s, NmPattern p, TileSolver solver,
                             TileCounters& counters) {
  BitMask mask(s.rows(), s.cols());
  std::vector<uint64_t> bits(static_cast<size_t>(s.rows() * (s.cols() / p.m)), ~uint64_t{0});
  counters = {};
  if (p.m <= 4) {
    tiles_with<4>(s, p, solver, bits, counters);
  } else if (p.m <= 8) {
    tiles_with<8>(s, p, solver, bits, counters);
  } else if (p.m <= 16) {
    tiles_with<16>(s, p, solver, bits, counters);
  } else if (p.m <= 32) {
    tiles_with<32>(s, p, solver, bits, counters);
  } else {
    tiles_with<64>(s, p, solver, bits, counters);
  }
  const int64_t wpr = mask.words_per_row();
  for (int64_t t = 0; t < s.rows() * wpr; ++t) {
    cuda::detail::assemble_word_thread(t, bits.data(), s.cols(), p.m, s.cols() / p.m, wpr,
                                       mask.row_words(0));
  }
  return mask;
}

TEST(CudaKernelBodies, ExactTransposableEqualsTheCpu) {
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    SCOPED_TRACE(::testing::Message() << p.to_string() << " " << sh.rows << "x" << sh.cols);
    for (int ties = 0; ties < 2; ++ties) {
      const Matrix s = ties
                           ? testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 3, 7))
                           : testing::abs_of(testing::random_matrix(sh.rows, sh.cols, 7));
      TileCounters counters{};
      TransposableResult gpu;
      gpu.mask = emulate_transposable(s, p, TileSolver::kExact, counters);
      const TransposableResult cpu = mask_transposable_exact(s.view(), p);
      EXPECT_EQ(counters.failures, 0u);
      EXPECT_EQ(static_cast<int64_t>(counters.tiles_exactly_n), cpu.stats.tiles);
      gpu.stats.objective = mask_score(s.view(), gpu.mask);
      gpu.stats.tiles = cpu.stats.tiles;
      gpu.stats.tiles_exactly_n = static_cast<int64_t>(counters.tiles_exactly_n);
      check_transposable_result(s.view(), p, gpu, true);
      EXPECT_NEAR(gpu.stats.objective, cpu.stats.objective, 1e-9 * cpu.stats.objective);
      if (!ties || (p == NmPattern{2, 4})) {
        EXPECT_TRUE(gpu.mask == cpu.mask) << "ties " << ties;
      }
    }
  }
}

TEST(CudaKernelBodies, GreedyTransposableEqualsTheCpu) {
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    if (sh.m > cuda::detail::kMaxTileGreedy) continue;
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    const Matrix s = testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 2, 9));
    for (GreedyOrder order : {GreedyOrder::kKeepHeavyFirst, GreedyOrder::kPruneLightFirst}) {
      TileCounters counters{};
      const BitMask gpu = emulate_transposable(s, p,
                                               order == GreedyOrder::kKeepHeavyFirst
                                                   ? TileSolver::kGreedyKeepHeavy
                                                   : TileSolver::kGreedyPruneLight,
                                               counters);
      const TransposableResult cpu = mask_transposable_greedy(s.view(), p, order);
      EXPECT_TRUE(gpu == cpu.mask) << p.to_string() << " order " << static_cast<int>(order);
      EXPECT_EQ(static_cast<int64_t>(counters.tiles_exactly_n), cpu.stats.tiles_exactly_n);
    }
  }
}

TEST(CudaKernelBodies, RowWiseMaskEqualsTheCpuAndFlagsBadScores) {
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    Matrix s = testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 2, 3));
    s(0, 0) = std::numeric_limits<float>::infinity();
    BitMask mine(s.rows(), s.cols());
    unsigned bad = 0;
    const int64_t wpr = mine.words_per_row();
    for (int64_t t = 0; t < s.rows() * wpr; ++t) {
      cuda::detail::nm_rows_word_thread(t, s.data(), s.cols(), s.cols(), p.n, p.m, wpr,
                                        mine.row_words(0), &bad);
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_TRUE(mine == mask_nm_rows(s.view(), p)) << p.to_string();
    s(s.rows() - 1, s.cols() - 1) = std::nanf("");
    for (int64_t t = 0; t < s.rows() * wpr; ++t) {
      cuda::detail::nm_rows_word_thread(t, s.data(), s.cols(), s.cols(), p.n, p.m, wpr,
                                        mine.row_words(0), &bad);
    }
    EXPECT_EQ(bad, 1u);
  }
}

TEST(CudaKernelBodies, BiMaskBackwardEqualsTheCpu) {
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    const Matrix w = testing::random_integer_matrix(sh.rows, sh.cols, 2, 5);
    const BitMask f = mask_nm_magnitude(w.view(), p);
    for (int cand = 0; cand < 3; ++cand) {
      const std::vector<int64_t> perm = bimask_candidate(sh.rows, 4, cand);
      BitMask mine(sh.rows, sh.cols);
      const int64_t wpr = mine.words_per_row();
      for (int64_t t = 0; t < (sh.rows / p.m) * wpr; ++t) {
        cuda::detail::bimask_backward_thread(t, w.data(), sh.cols, sh.cols, f.row_words(0), wpr,
                                             perm.data(), p.n, p.m, mine.row_words(0));
      }
      EXPECT_TRUE(mine == bimask_backward(w.view(), f, p, perm))
          << p.to_string() << " candidate " << cand;
    }
  }
}

// Strided input and output (ld > cols) as the kernels see them; every method, axis and pattern.
TEST(CudaKernelBodies, GradientPruningEqualsTheCpuBitForBit) {
  const int patterns[][2] = {{1, 2}, {2, 4}, {1, 4}, {4, 8}, {3, 7}, {8, 16}, {16, 32}, {2, 64}};
  for (const auto& nm : patterns) {
    const NmPattern p = NmPattern::make(nm[0], nm[1]);
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (GradMethod method : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
        if (method == GradMethod::kMvueApprox24 && !(p == NmPattern{2, 4})) continue;
        const bool rows_axis = axis == NmAxis::kRows;
        const int64_t rows = rows_axis ? 37 : 3 * p.m;
        const int64_t cols = rows_axis ? 5 * p.m : 131;
        SCOPED_TRACE(::testing::Message() << p.to_string() << " " << grad_method_name(method)
                                          << " axis " << static_cast<int>(axis));
        Matrix big = testing::random_matrix(rows, cols + 3, 11);
        for (int64_t k = 0; k < big.size(); k += 7) big.data()[k] = 0.0f;  // short groups
        const ConstMatrixViewF g(big.data(), rows, cols, cols + 3);
        const GradPruneOptions o{method, p, axis, 42, tensor_stream_id("layer.dy")};
        std::vector<float> out(static_cast<size_t>(rows * (cols + 5)), -1.0f);
        unsigned bad = 0;
        const CounterRng rng(o.seed, o.stream);
        // The thread body as the launch instantiates it (m fixed at compile time where it is
        // one of the dispatched sizes), and with m at run time: both equal the CPU.
        std::vector<float> out_runtime_m(out);
        cuda::detail::with_group_size(p.m, [&](auto k) {
          for (int64_t t = 0; t < rows * cols / p.m; ++t) {
            cuda::detail::grad_prune_thread<decltype(k)::value>(t, g.data(), rows, cols, g.ld(),
                                                                method, p.n, p.m, rows_axis, rng,
                                                                out.data(), cols + 5, &bad);
            cuda::detail::grad_prune_thread(t, g.data(), rows, cols, g.ld(), method, p.n, p.m,
                                            rows_axis, rng, out_runtime_m.data(), cols + 5, &bad);
          }
        });
        EXPECT_TRUE(out == out_runtime_m) << p.to_string();
        EXPECT_EQ(bad, 0u);
        const Matrix cpu = grad_prune(g, o);
        bool same = true;
        for (int64_t r = 0; r < rows; ++r) {
          same = same && std::memcmp(&out[static_cast<size_t>(r * (cols + 5))], cpu.view().row(r),
                                     static_cast<size_t>(cols) * sizeof(float)) == 0;
        }
        EXPECT_TRUE(same) << p.to_string() << " " << grad_method_name(method) << " axis "
                          << static_cast<int>(axis);
      }
    }
  }
}

// The four-group body over every thread index, on shapes that fit it (16-byte rows), against
// the CPU bit for bit; and the fit rule itself.
TEST(CudaKernelBodies, FourGroupGradientPruningEqualsTheCpuBitForBit) {
  for (const int m : {2, 4, 8}) {
    const NmPattern p = NmPattern::make(m / 2, m);
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (GradMethod method : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
        if (method == GradMethod::kMvueApprox24 && m != 4) continue;
        const bool rows_axis = axis == NmAxis::kRows;
        const int64_t rows = rows_axis ? 7 : 3 * m;
        const int64_t cols = rows_axis ? 12 * m : 136;
        const int64_t ld = cols + 4;
        AlignedBuffer<float> big(static_cast<size_t>(rows * ld));
        const Matrix values = testing::random_matrix(rows, ld, 23);
        std::copy(values.data(), values.data() + rows * ld, big.data());
        for (int64_t k = 0; k < rows * ld; k += 5) big.data()[k] = 0.0f;  // short groups
        const ConstMatrixViewF g(big.data(), rows, cols, ld);
        AlignedBuffer<float> out(static_cast<size_t>(rows * ld));
        ASSERT_TRUE(
            cuda::detail::grad_prune_quads_fit(cols, ld, ld, m, rows_axis, g.data(), out.data()));
        const GradPruneOptions o{method, p, axis, 9, tensor_stream_id("layer.dy")};
        const CounterRng rng(o.seed, o.stream);
        unsigned bad = 0;
        const auto run = [&](auto k) {
          for (int64_t t = 0; t < rows * cols / (4 * m); ++t) {
            cuda::detail::grad_prune_quad_thread<decltype(k)::value>(
                t, g.data(), cols, ld, method, p.n, rows_axis, rng, out.data(), ld, &bad);
          }
        };
        if (m == 2) run(std::integral_constant<int, 2>{});
        if (m == 4) run(std::integral_constant<int, 4>{});
        if (m == 8) run(std::integral_constant<int, 8>{});
        EXPECT_EQ(bad, 0u);
        const Matrix cpu = grad_prune(g, o);
        bool same = true;
        for (int64_t r = 0; r < rows; ++r) {
          same = same && std::memcmp(out.data() + r * ld, cpu.view().row(r),
                                     static_cast<size_t>(cols) * sizeof(float)) == 0;
        }
        EXPECT_TRUE(same) << p.to_string() << " " << grad_method_name(method) << " axis "
                          << static_cast<int>(axis);
      }
    }
  }
  AlignedBuffer<float> a(64);
  EXPECT_FALSE(cuda::detail::grad_prune_quads_fit(16, 16, 16, 16, true, a.data(), a.data()));
  EXPECT_FALSE(cuda::detail::grad_prune_quads_fit(12, 12, 12, 4, true, a.data(), a.data()));
  EXPECT_TRUE(cuda::detail::grad_prune_quads_fit(16, 16, 16, 4, true, a.data(), a.data()));
  EXPECT_FALSE(cuda::detail::grad_prune_quads_fit(16, 18, 16, 4, false, a.data(), a.data()));
  EXPECT_FALSE(cuda::detail::grad_prune_quads_fit(16, 16, 16, 4, false, a.data() + 1, a.data()));
  EXPECT_TRUE(cuda::detail::grad_prune_quads_fit(12, 16, 16, 4, false, a.data(), a.data()));
}

TEST(CudaKernelBodies, GradientPruningFlagsNonFiniteAndOverflow) {
  const NmPattern p = NmPattern::make(2, 4);
  for (const float v : {std::nanf(""), std::numeric_limits<float>::infinity(), 3e38f}) {
    Matrix g = testing::random_matrix(8, 8, 1);
    g(3, 4) = v;
    g(3, 5) = v;  // 3e38 twice overflows the group's magnitude sum
    std::vector<float> out(64);
    unsigned bad = 0;
    const CounterRng rng(1, 2);
    for (int64_t t = 0; t < 16; ++t) {
      cuda::detail::grad_prune_thread(t, g.data(), 8, 8, 8, GradMethod::kMvue, p.n, p.m, true, rng,
                                      out.data(), 8, &bad);
    }
    EXPECT_EQ(bad, 1u) << v;
  }
}

}  // namespace
}  // namespace nms
