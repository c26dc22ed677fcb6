// nm_gemm_pack_masked_transposed_into against its definition, transpose_into followed by
// nm_gemm_pack_masked_into, entry for entry: every ISA level and kernel form, identity and
// permuted row orders, tile, stage (48 rows) and depth-block edges, groups keeping fewer than n,
// a strided W, the streamed (>= 8 MB) path, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/same_operand.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/transpose.h"
#include "nmsparse/mask/standard.h"
#include "testing/expect_error.h"
#include "testing/random.h"

namespace nms {
namespace {

// W [k_rows, cols] at ld cols + 3; order empty or a permutation of the rows.
struct Source {
  std::vector<float> data;
  ConstMatrixViewF view;
  std::vector<int64_t> order;
};

Source make_source(int64_t k_rows, int64_t cols, bool permuted, uint64_t seed) {
  const Matrix dense = testing::random_matrix(k_rows, cols, seed);
  Source s;
  const int64_t ld = cols + 3;
  s.data.assign(static_cast<size_t>(k_rows * ld), -7.0f);
  for (int64_t r = 0; r < k_rows; ++r) {
    std::copy_n(dense.view().row(r), cols, s.data.data() + r * ld);
  }
  s.view = ConstMatrixViewF(s.data.data(), k_rows, cols, ld);
  if (permuted) {
    s.order.resize(static_cast<size_t>(k_rows));
    std::iota(s.order.begin(), s.order.end(), 0);
    for (size_t i = 0; i < s.order.size(); ++i) {  // a fixed shuffle: i <-> (7 i + 3) mod K
      std::swap(s.order[i], s.order[(7 * i + 3) % s.order.size()]);
    }
  }
  return s;
}

// The magnitude mask of (P W)ᵀ with every 5th group of row j thinned by one (rows keeping fewer
// than n: padded slots).
BitMask mask_of_transposed(const Source& s, NmPattern p) {
  Matrix t(s.view.cols(), s.order.empty() ? s.view.rows() : static_cast<int64_t>(s.order.size()));
  transpose_into(s.view, t.view(), s.order);
  BitMask mask = mask_nm_magnitude(t.view(), p);
  for (int64_t j = 0; j < mask.rows(); ++j) {
    for (int64_t g = j % 5; g < mask.cols() / p.m; g += 5) {
      for (int64_t c = g * p.m; c < (g + 1) * p.m; ++c) {
        if (mask.get(j, c)) {
          mask.set(j, c, false);
          break;
        }
      }
    }
  }
  return mask;
}

void expect_equals_transpose_then_pack(const Source& s, const BitMask& mask_t, NmPattern p) {
  Matrix t(mask_t.rows(), mask_t.cols());
  transpose_into(s.view, t.view(), s.order);
  NmGemmOperand want;
  nm_gemm_pack_masked_into(t.view(), mask_t, p, want);
  NmGemmOperand got;
  nm_gemm_pack_masked_transposed_into(s.view, s.order, mask_t, p, got);
  testing::expect_same_operand(got, want);
}

TEST(NmGemmPackTransposed, EqualsTransposeThenPack) {
  uint64_t seed = 900;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
      ScopedNmGemmKernel scoped_kernel(kernel);
      for (NmPattern p : {NmPattern{2, 4}, NmPattern{1, 4}, NmPattern{4, 8}, NmPattern{3, 7},
                          NmPattern{16, 32}}) {
        // K around 16-row transposes, lane chunks and depth blocks (kc = 128 / m · m); C (A's
        // rows) around tiles of 6, stages of 48 and lane blocks of 32.
        for (int64_t groups : {1, 5, 32, 37, 70}) {
          for (int64_t cols : {1, 5, 6, 16, 31, 32, 33, 47, 48, 49, 65, 100, 130}) {
            for (bool permuted : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << isa_name(isa) << " " << nm_gemm_kernel_name(kernel) << " "
                           << p.to_string() << " K " << groups * p.m << " C " << cols
                           << (permuted ? " permuted" : ""));
              const Source s = make_source(groups * p.m, cols, permuted, seed++);
              expect_equals_transpose_then_pack(s, mask_of_transposed(s, p), p);
            }
          }
        }
      }
    }
  }
}

// 8 MB and more: runs through a buffer, streamed out; a padded last tile and stage, a partial
// last depth block.
TEST(NmGemmPackTransposed, LargeOperandEqualsTransposeThenPack) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    SCOPED_TRACE(isa_name(isa));
    const Source s = make_source(2060, 1031, true, 77);
    expect_equals_transpose_then_pack(s, mask_of_transposed(s, {2, 4}), {2, 4});
  }
}

// An order shorter than W's rows, with a repeat: A has order.size() columns (transpose_into's
// contract).
TEST(NmGemmPackTransposed, OrderSelectsAndRepeatsRows) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    SCOPED_TRACE(isa_name(isa));
    Source s = make_source(40, 53, false, 31);
    for (int64_t k = 0; k < 36; ++k) s.order.push_back((k * 11 + 5) % 40);
    s.order[7] = s.order[3];
    expect_equals_transpose_then_pack(s, mask_of_transposed(s, {2, 4}), {2, 4});
  }
}

// The lanes of (P W)ᵀ depend on mask_t alone: a repack from the same mask_t rewrites the values
// only, whatever W and the order; another mask_t packs both. Each result equals a fresh pack.
TEST(NmGemmPackTransposed, RepackFromTheSameMaskRewritesTheValues) {
  uint64_t seed = 300;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > isa_supported()) continue;
    ScopedIsa scoped(isa);
    for (NmGemmKernel kernel : {NmGemmKernel::kBroadcast, NmGemmKernel::kPermute}) {
      ScopedNmGemmKernel scoped_kernel(kernel);
      for (NmPattern p : {NmPattern{2, 4}, NmPattern{4, 8}}) {
        for (const auto& [groups, cols] :
             {std::pair<int64_t, int64_t>{1, 5}, {37, 33}, {70, 100}}) {
          SCOPED_TRACE(::testing::Message()
                       << isa_name(isa) << " " << nm_gemm_kernel_name(kernel) << " "
                       << p.to_string() << " K " << groups * p.m << " C " << cols);
          const Source s1 = make_source(groups * p.m, cols, false, seed++);
          const Source s2 = make_source(groups * p.m, cols, true, seed++);
          const BitMask mask_t = mask_of_transposed(s1, p);
          const auto fresh = [&](const Source& s, const BitMask& m) {
            NmGemmOperand op;
            nm_gemm_pack_masked_transposed_into(s.view, s.order, m, p, op);
            return op;
          };
          NmGemmOperand op;
          nm_gemm_pack_masked_transposed_into(s1.view, s1.order, mask_t, p, op);
          const bool lanes = !op.lane_values.empty();
          EXPECT_EQ(op.lane_mask, lanes ? mask_t : BitMask());
          // Another W and order, the same mask_t: the values only (the lanes poisoned to show it).
          if (lanes) std::fill_n(op.lane_index.data(), op.lane_index.size(), 99);
          nm_gemm_pack_masked_transposed_into(s2.view, s2.order, mask_t, p, op);
          testing::expect_same_buffer(op.lane_values, fresh(s2, mask_t).lane_values, "values");
          if (lanes) {
            EXPECT_EQ(op.lane_index.data()[0], 99);
          }
          BitMask other = mask_t;  // row 0's first group emptied, or keeping column 0
          for (int64_t c = 0; c < p.m; ++c) other.set(0, c, false);
          if (other == mask_t) other.set(0, 0);
          nm_gemm_pack_masked_transposed_into(s2.view, s2.order, other, p, op);
          testing::expect_same_operand(op, fresh(s2, other));
        }
      }
    }
  }
}

TEST(NmGemmPackTransposed, Errors) {
  const Source s = make_source(8, 2, false, 5);
  NmGemmOperand op;
  BitMask mask(2, 8);
  mask.set(1, 4);
  mask.set(1, 5);
  mask.set(1, 6);
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_transposed_into(s.view, {}, mask, {2, 4}, op);
      },
      "row 1 group 1 (columns 4..7) keeps 3 > n (2)");
  const std::vector<int64_t> bad_order = {0, 9, 1, 2};
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_transposed_into(s.view, bad_order, BitMask(2, 4), {2, 4}, op);
      },
      "order[1] = 9 is outside [0, 8)");
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_transposed_into(s.view, {}, BitMask(8, 2), {2, 4}, op);
      },
      "mask shape (8 x 2) differs from the transposed matrix (2 x 8)");
  testing::expect_error(
      [&] {
        nm_gemm_pack_masked_transposed_into(s.view, {}, BitMask(2, 8), {2, 3}, op);
      },
      "m (3) does not divide the grouped axis (8)");
}

}  // namespace
}  // namespace nms
