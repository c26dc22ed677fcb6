// The CUDA backend against the CPU library on the same inputs. Without a GPU every comparison
// skips with the reason (GTEST_SKIP), and the no-device behaviour itself is tested: each entry
// point throws nms::Error saying that no device is there, and nothing is left half-written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_support.h"
#include "cuda_test_shapes.h"
#include "nmsparse/core/half.h"
#include "nmsparse/cuda/cuda.h"
#include "nmsparse/cuda/sparse_gemm.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/mask/bimask.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

#define NMS_REQUIRE_GPU()                                   \
  do {                                                      \
    std::string why;                                        \
    if (!cuda::device_available(&why)) GTEST_SKIP() << why; \
  } while (0)

bool bitwise_equal(const Matrix& a, const Matrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

TEST(Cuda, WithoutADeviceEveryCallSaysSo) {
  std::string why;
  if (cuda::device_available(&why)) GTEST_SKIP() << "a device is present";
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  const Matrix s = testing::abs_of(testing::random_matrix(8, 8, 1));
  testing::expect_error(
      [&] {
        cuda::mask_transposable_gpu(s.view(), NmPattern::make(2, 4), TransposableSolver::kExact);
      },
      "no CUDA device");
  testing::expect_error([&] { cuda::mask_nm_rows_gpu(s.view(), NmPattern::make(2, 4)); },
                        "no CUDA device");
  testing::expect_error(
      [&] { cuda::mask_transposable_entropic_gpu(s.view(), NmPattern::make(2, 4)); },
      "no CUDA device");
  Matrix out(8, 8);
  testing::expect_error([&] { cuda::grad_prune_gpu_into(s.view(), {}, out.view()); },
                        "no CUDA device");
  testing::expect_error([&] { cuda::device_info(); }, "no CUDA device");
}

TEST(Cuda, DeviceInfoIsPlausible) {
  NMS_REQUIRE_GPU();
  const cuda::DeviceInfo info = cuda::device_info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 7);
  EXPECT_GT(info.memory_bytes, int64_t{1} << 30);
  EXPECT_GT(info.multiprocessors, 0);
}

TEST(Cuda, ExactTransposableEqualsTheCpuOptimum) {
  NMS_REQUIRE_GPU();
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    SCOPED_TRACE(::testing::Message() << p.to_string() << " " << sh.rows << "x" << sh.cols);
    for (int ties = 0; ties < 2; ++ties) {
      const Matrix s = ties
                           ? testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 3, 7))
                           : testing::abs_of(testing::random_matrix(sh.rows, sh.cols, 7));
      const TransposableResult gpu =
          cuda::mask_transposable_gpu(s.view(), p, TransposableSolver::kExact);
      const TransposableResult cpu = mask_transposable_exact(s.view(), p);
      check_transposable_result(s.view(), p, gpu, true);
      EXPECT_EQ(gpu.stats.tiles_exactly_n, gpu.stats.tiles);
      EXPECT_NEAR(gpu.stats.objective, cpu.stats.objective, 1e-9 * cpu.stats.objective);
      // 2:4 keeps the CPU's tie rule; elsewhere equal masks need a unique optimum.
      if (!ties || (p == NmPattern{2, 4})) {
        EXPECT_TRUE(gpu.mask == cpu.mask) << "ties " << ties;
      }
    }
  }
}

TEST(Cuda, GreedyTransposableEqualsTheCpuInBothOrders) {
  NMS_REQUIRE_GPU();
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    if (sh.m > 32) continue;
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    const Matrix s = testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 2, 9));
    for (GreedyOrder order : {GreedyOrder::kKeepHeavyFirst, GreedyOrder::kPruneLightFirst}) {
      const TransposableResult gpu = cuda::mask_transposable_greedy_gpu(s.view(), p, order);
      const TransposableResult cpu = mask_transposable_greedy(s.view(), p, order);
      EXPECT_TRUE(gpu.mask == cpu.mask) << p.to_string() << " order " << static_cast<int>(order);
      EXPECT_EQ(gpu.stats.tiles_exactly_n, cpu.stats.tiles_exactly_n);
      EXPECT_DOUBLE_EQ(gpu.stats.objective, cpu.stats.objective);
    }
  }
  const Matrix s = testing::abs_of(testing::random_matrix(64, 64, 1));
  testing::expect_error(
      [&] {
        cuda::mask_transposable_gpu(s.view(), NmPattern::make(8, 64), TransposableSolver::kGreedy);
      },
      "supports m <= 32");
}

// Entropic: not bit-identical to the CPU (fast exp/log), so the GPU result is held to what the
// solver promises: valid, exactly n per tile row and column with repair, a kept score within
// 0.1 % of the CPU entropic solver's and within 0.5 % of the exact optimum (the CPU solver's mean
// gap is 0.01-0.1 % at the defaults, transposable_entropic.cpp), and most tiles equal to the
// CPU's. Shapes: whole warps, a partial last warp (5 tiles of 8:16), an all-zero tile.
TEST(Cuda, EntropicTransposableMatchesTheCpuSolver) {
  NMS_REQUIRE_GPU();
  struct Case {
    int n, m;
    int64_t rows, cols;
  };
  for (const Case& c : {Case{1, 2, 64, 66}, Case{2, 4, 64, 132}, Case{4, 8, 96, 104},
                        Case{8, 16, 16, 80}, Case{8, 16, 128, 144}, Case{16, 32, 192, 192}}) {
    const NmPattern p = NmPattern::make(c.n, c.m);
    SCOPED_TRACE(::testing::Message() << p.to_string() << " " << c.rows << "x" << c.cols);
    Matrix s = testing::abs_of(testing::random_matrix(c.rows, c.cols, 17));
    for (int i = 0; i < c.m; ++i) {
      for (int j = 0; j < c.m; ++j) s(i, c.m + j) = 0.0f;  // tile (0, 1) is all zero
    }
    cuda::GpuTiming timing;
    const TransposableResult gpu = cuda::mask_transposable_entropic_gpu(s.view(), p, {}, &timing);
    check_transposable_result(s.view(), p, gpu, true);
    EXPECT_GT(timing.kernel_ms, 0.0);
    const TransposableResult cpu = mask_transposable_entropic(s.view(), p);
    const TransposableResult exact = mask_transposable_exact(s.view(), p);
    EXPECT_LE(std::fabs(gpu.stats.objective - cpu.stats.objective), 1e-3 * cpu.stats.objective);
    EXPECT_GE(gpu.stats.objective, (1.0 - 5e-3) * exact.stats.objective);
    EXPECT_LE(gpu.stats.objective, exact.stats.objective * (1.0 + 1e-9));
    int64_t same = 0;
    for (int64_t i0 = 0; i0 < c.rows; i0 += c.m) {
      for (int64_t j0 = 0; j0 < c.cols; j0 += c.m) {
        bool equal = true;
        for (int64_t i = i0; i < i0 + c.m; ++i) {
          for (int64_t j = j0; j < j0 + c.m; ++j)
            equal = equal && gpu.mask.get(i, j) == cpu.mask.get(i, j);
        }
        same += equal;
      }
    }
    EXPECT_GE(2 * same, gpu.stats.tiles) << same << " of " << gpu.stats.tiles << " tiles equal";
    // Without repair: valid, at most n; the device's local search only fills tiles, and it
    // fills some whenever the rounding alone left tiles short.
    EntropicOptions raw;
    raw.local_search_steps = 0;
    raw.repair = false;
    const TransposableResult rounded = cuda::mask_transposable_entropic_gpu(s.view(), p, raw);
    check_transposable_result(s.view(), p, rounded, false);
    raw.local_search_steps = 10;
    const TransposableResult searched = cuda::mask_transposable_entropic_gpu(s.view(), p, raw);
    check_transposable_result(s.view(), p, searched, false);
    if (rounded.stats.tiles_exactly_n < rounded.stats.tiles) {
      EXPECT_GT(searched.stats.tiles_exactly_n, rounded.stats.tiles_exactly_n);
    }
    EXPECT_GE(searched.stats.objective, rounded.stats.objective);
  }
  const Matrix s = testing::abs_of(testing::random_matrix(24, 24, 1));
  testing::expect_error(
      [&] { cuda::mask_transposable_entropic_gpu(s.view(), NmPattern::make(6, 12)); },
      "supports m in {2, 4, 8, 16, 32}");
  EntropicOptions bad;
  bad.temperature = 0.0f;
  testing::expect_error(
      [&] { cuda::mask_transposable_entropic_gpu(s.view(), NmPattern::make(2, 4), bad); },
      "temperature must be finite and positive");
}

TEST(Cuda, RowWiseMaskEqualsTheCpu) {
  NMS_REQUIRE_GPU();
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    Matrix s = testing::abs_of(testing::random_integer_matrix(sh.rows, sh.cols, 2, 3));
    s(0, 0) = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(cuda::mask_nm_rows_gpu(s.view(), p) == mask_nm_rows(s.view(), p)) << p.to_string();
  }
  Matrix bad = testing::abs_of(testing::random_matrix(4, 8, 2));
  bad(2, 5) = -1.0f;
  testing::expect_error([&] { cuda::mask_nm_rows_gpu(bad.view(), NmPattern::make(2, 4)); },
                        "score (2, 5) is -1");
}

TEST(Cuda, BiMaskBackwardEqualsTheCpu) {
  NMS_REQUIRE_GPU();
  for (const testing::CudaShape& sh : testing::kCudaShapes) {
    const NmPattern p = NmPattern::make(sh.n, sh.m);
    const Matrix w = testing::random_integer_matrix(sh.rows, sh.cols, 2, 5);
    const BitMask f = mask_nm_magnitude(w.view(), p);
    for (int cand = 0; cand < 3; ++cand) {
      const std::vector<int64_t> perm = bimask_candidate(sh.rows, 4, cand);
      EXPECT_TRUE(cuda::bimask_backward_gpu(w.view(), f, p, perm) ==
                  bimask_backward(w.view(), f, p, perm))
          << p.to_string() << " candidate " << cand;
    }
  }
}

TEST(Cuda, GradientPruningEqualsTheCpuBitForBit) {
  NMS_REQUIRE_GPU();
  const int patterns[][2] = {{1, 2}, {2, 4}, {1, 4}, {4, 8}, {3, 7}, {8, 16}, {16, 32}, {2, 64}};
  for (const auto& nm : patterns) {
    const NmPattern p = NmPattern::make(nm[0], nm[1]);
    for (NmAxis axis : {NmAxis::kRows, NmAxis::kCols}) {
      for (GradMethod method : {GradMethod::kMvue, GradMethod::kMvueApprox24, GradMethod::kTopN}) {
        if (method == GradMethod::kMvueApprox24 && !(p == NmPattern{2, 4})) continue;
        const int64_t rows = axis == NmAxis::kCols ? 3 * p.m : 37;
        // The second width takes the four-group kernel where m <= 8 (16-byte rows).
        for (const int64_t cols :
             {axis == NmAxis::kRows ? 5 * p.m : 131, axis == NmAxis::kRows ? 8 * p.m : 132}) {
          Matrix g = testing::random_matrix(rows, cols, 11);
          for (int64_t k = 0; k < g.size(); k += 7) g.data()[k] = 0.0f;  // short groups
          const GradPruneOptions o{method, p, axis, 42, tensor_stream_id("layer.dy")};
          Matrix gpu(rows, cols);
          cuda::grad_prune_gpu_into(g.view(), o, gpu.view());
          const Matrix cpu = grad_prune(g.view(), o);
          EXPECT_TRUE(bitwise_equal(gpu, cpu))
              << p.to_string() << " " << grad_method_name(method) << " axis "
              << static_cast<int>(axis) << " cols " << cols;
        }
      }
    }
  }
  Matrix g = testing::random_matrix(8, 8, 1);
  g(3, 6) = std::numeric_limits<float>::quiet_NaN();
  Matrix out(8, 8);
  Matrix wide = testing::random_matrix(8, 16, 1);  // the four-group kernel flags it too
  wide(5, 9) = std::numeric_limits<float>::infinity();
  Matrix wide_out(8, 16);
  testing::expect_error(
      [&] {
        cuda::grad_prune_gpu_into(wide.view(),
                                  {GradMethod::kMvue, NmPattern::make(2, 4), NmAxis::kRows, 1, 2},
                                  wide_out.view());
      },
      "at (row 5, col 9)");
  testing::expect_error([&] { cuda::grad_prune_gpu_into(g.view(), {}, out.view()); },
                        "at (row 3, col 6)");
}

// bf16 copy of a host matrix, and the float values it holds.
std::vector<uint16_t> to_bf16(const Matrix& a, Matrix& rounded) {
  std::vector<uint16_t> out(static_cast<size_t>(a.size()));
  f32_to_bf16({a.data(), out.size()}, out);
  rounded = Matrix(a.rows(), a.cols());
  bf16_to_f32(out, {rounded.data(), out.size()});
  return out;
}

std::vector<float> download_bf16(const cuda::detail::DeviceBuffer<uint16_t>& d) {
  std::vector<uint16_t> bits(d.size());
  d.download(bits.data(), bits.size());
  std::vector<float> out(bits.size());
  bf16_to_f32(bits, out);
  return out;
}

// The three training GEMMs at 2:4 through cuSPARSELt and cuBLASLt against a double product of
// the same bf16 operands. Tolerance: the bf16 result's rounding (2^-9 relative) plus fp32
// accumulation over K <= 128 terms: 1 % of the largest |result|.
TEST(Cuda, SparseGemmsComputeTheTrainingProducts) {
  NMS_REQUIRE_GPU();
  std::string why;
  if (!cuda::sparse_gemm_available(&why)) GTEST_SKIP() << why;
  const cuda::GemmShape s{64, 128, 96};
  for (cuda::TrainingGemm gemm : {cuda::TrainingGemm::kForward, cuda::TrainingGemm::kBackwardData,
                                  cuda::TrainingGemm::kWeightGrad}) {
    SCOPED_TRACE(std::string(cuda::training_gemm_name(gemm)));
    const cuda::GemmOperands ops = cuda::gemm_operands(gemm, s);
    const NmAxis axis = gemm == cuda::TrainingGemm::kForward ? NmAxis::kRows : NmAxis::kCols;
    const Matrix dense_a = testing::random_matrix(ops.sparse_rows, ops.sparse_cols, 21);
    const Matrix pruned =
        grad_prune(dense_a.view(), {GradMethod::kTopN, NmPattern::make(2, 4), axis, 0, 0});
    Matrix a;
    Matrix b;
    const std::vector<uint16_t> a16 = to_bf16(pruned, a);
    const std::vector<uint16_t> b16 =
        to_bf16(testing::random_matrix(ops.dense_rows, ops.dense_cols, 22), b);
    // Row-major reference from the rounded operands.
    Matrix ref(ops.result_rows, ops.result_cols);
    double largest = 0.0;
    for (int64_t r = 0; r < ops.result_rows; ++r) {
      for (int64_t q = 0; q < ops.result_cols; ++q) {
        double acc = 0.0;
        if (gemm == cuda::TrainingGemm::kForward) {  // Y = X W^T: a = W, b = X
          for (int64_t i = 0; i < s.in; ++i) acc += double{b(r, i)} * a(q, i);
        } else if (gemm == cuda::TrainingGemm::kBackwardData) {  // dX = dY W: a = W, b = dY
          for (int64_t o = 0; o < s.out; ++o) acc += double{b(r, o)} * a(o, q);
        } else {  // dW^T = X^T dY: a = dY, b = X
          for (int64_t t = 0; t < s.tokens; ++t) acc += double{b(t, r)} * a(t, q);
        }
        ref(r, q) = static_cast<float>(acc);
        largest = std::max(largest, std::fabs(acc));
      }
    }
    cuda::detail::DeviceBuffer<uint16_t> da(a16.size()), db(b16.size());
    cuda::detail::DeviceBuffer<uint16_t> dd(static_cast<size_t>(ref.size()));
    da.upload(a16.data(), a16.size());
    db.upload(b16.data(), b16.size());
    const auto expect_close = [&](const char* what) {
      const std::vector<float> got = download_bf16(dd);
      double worst = 0.0;
      for (size_t k = 0; k < got.size(); ++k) {
        worst = std::max(worst, std::fabs(double{got[k]} - ref.data()[k]));
      }
      EXPECT_LE(worst, 0.01 * largest) << what;
    };
    cuda::Sparse24Gemm sparse(gemm, s);
    sparse.set_sparse_operand(da.get());
    sparse.run(db.get(), dd.get());
    cuda::detail::sync_checked("sparse run");
    expect_close("cuSPARSELt");
    // Our compressed format, converted: the same operand, so the same result.
    sparse.set_sparse_operand(nm_compress(a.view(), NmPattern::make(2, 4), axis));
    sparse.run(db.get(), dd.get());
    cuda::detail::sync_checked("sparse run from CompressedNm");
    expect_close("cuSPARSELt from CompressedNm");
    cuda::DenseGemm dense(gemm, s);
    dense.run(da.get(), db.get(), dd.get());
    cuda::detail::sync_checked("dense run");
    expect_close("cuBLASLt");
  }
  testing::expect_error(
      [&] {
        cuda::Sparse24Gemm(cuda::TrainingGemm::kForward, {64, 120, 96});
      },
      "multiples of 16");
}

}  // namespace
}  // namespace nms
