// nm_gemm_pack_masked_into: dense A and an N:M mask -> the packed operand of nm_gemm, without the
// compressed intermediate (nm_gemm.h). On an over-full group it throws and dst is unspecified.
// Entries are exactly those of nm_gemm_pack( nm_compress_masked(a, mask)): per group the kept
// columns in increasing order, padded with the group's lowest unkept columns at value 0 when it
// keeps fewer than n.
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/bits.h"
#include "core/parallel.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {
namespace detail {
void mark_shared_tiles(NmGemmOperand& a);  // nm_gemm_pack.cpp
}  // namespace detail

namespace {

// Bits [pos, pos + len) of a mask row, len in [1, 64].
inline uint64_t row_bits(const uint64_t* words, int64_t pos, int len) {
  const int64_t w = pos >> 6;
  const int shift = static_cast<int>(pos & 63);
  uint64_t bits = words[w] >> shift;
  if (shift + len > 64) bits |= words[w + 1] << (64 - shift);
  return len == 64 ? bits : bits & ((uint64_t{1} << len) - 1);
}

}  // namespace

void nm_gemm_pack_masked_into(ConstMatrixViewF a, const BitMask& mask, NmPattern pattern,
                              NmGemmOperand& dst) {
  pattern.validate();
  const int64_t r_count = a.rows();
  const int64_t k = a.cols();
  NMS_CHECK(mask.rows() == r_count && mask.cols() == k, "mask shape (", mask.rows(), " x ",
            mask.cols(), ") differs from the matrix (", r_count, " x ", k, ")");
  NMS_CHECK(k % pattern.m == 0, "m (", pattern.m, ") does not divide the grouped axis (", k, ")");
  const int n = pattern.n;
  const int m = pattern.m;
  dst.rows = r_count;
  dst.depth = k;
  dst.pattern = pattern;
  const detail::NmGemmLayout lay(r_count, k, n, m);
  if (dst.packed.size() != lay.total_floats()) dst.packed.resize_for_overwrite(lay.total_floats());
  detail::parallel_for(lay.tiles, [&](int64_t tile) {
    for (int64_t b = 0; b < lay.depth_blocks; ++b) {
      float* e = dst.packed.data() + lay.entry(tile, lay.block_first_slot(b), 0);
      const int64_t col0 = b * lay.depth_block;
      const int64_t groups = lay.block_width(b) / m;
      for (int64_t gi = 0; gi < groups; ++gi) {
        int32_t offset[kNmGemmTileRows][kMaxGroupSize];  // padding rows: 0, as nm_gemm_pack
        float value[kNmGemmTileRows][kMaxGroupSize];
        for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
          const int64_t r = tile * kNmGemmTileRows + l;
          if (r >= r_count) {
            for (int j = 0; j < n; ++j) offset[l][j] = 0, value[l][j] = 0.0f;
            continue;
          }
          const int64_t c0 = col0 + gi * m;
          const uint64_t real = row_bits(mask.row_words(r), c0, m);
          const int count = detail::popcount64(real);
          NMS_CHECK(count <= n, "row ", r, " group ", c0 / m, " (columns ", c0, "..", c0 + m - 1,
                    ") keeps ", count, " > n (", n, ")");
          uint64_t kept = real;
          for (int pc = count; pc < n; ++pc) kept |= ~kept & (kept + 1);
          const float* src = a.row(r) + c0;
          for (int j = 0; j < n; ++j) {
            const int i = std::countr_zero(kept);
            kept &= kept - 1;
            offset[l][j] = static_cast<int32_t>((gi * m + i) * kNmGemmPanel);
            value[l][j] = ((real >> i) & 1) != 0 ? src[i] : 0.0f;
          }
        }
        for (int j = 0; j < n; ++j) {
          for (int64_t l = 0; l < kNmGemmTileRows; ++l, e += 2) {
            e[0] = value[l][j];
            std::memcpy(e + 1, &offset[l][j], sizeof(int32_t));
          }
        }
      }
    }
  });
  detail::mark_shared_tiles(dst);
}

}  // namespace nms
