// nm_gemm_pack_masked_into: dense A and an N:M mask -> the packed operand of nm_gemm, without the
// compressed intermediate (nm_gemm.h). On an over-full group it throws and dst is unspecified.
// Entries are exactly those of nm_gemm_pack( nm_compress_masked(a, mask)): per group the kept
// columns in increasing order, padded with the group's lowest unkept columns at value 0 when it
// keeps fewer than n.
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "core/bits.h"
#include "core/parallel.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/kernels/nm_gemm.h"
#ifdef NMS_HAVE_AVX512_KERNELS
#include "kernels/nm_gemm_pack24_avx512.h"
#endif

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

// One row's group at columns [c0, c0 + m): the kept in-group indices in increasing order, padded
// to n with the lowest unkept ones (value 0), written to entries e[(j * 6) * 2] of slot j.
// Returns false when the group keeps more than n.
template <int kN, int kM>
inline bool pack_group_row(const float* src, uint64_t real, int64_t col_in_block, float* e, int n) {
  const int nn = kN > 0 ? kN : n;
  // Groups of at most 4: the nibble's popcount from a 16-entry table in a constant (the library is
  // built for baseline x86-64, without POPCNT: the bit-twiddling count was ~30 % of the 2:4 time).
  const int count = kM > 0 && kM <= 4
                        ? static_cast<int>((0x4332322132212110ull >> (4 * real)) & 0xF)
                        : detail::popcount64(real);
  if (count > nn) return false;
  uint64_t kept = real;
  for (int pc = count; pc < nn; ++pc) kept |= ~kept & (kept + 1);
  for (int j = 0; j < nn; ++j) {
    const int i = std::countr_zero(kept);
    kept &= kept - 1;
    const auto offset = static_cast<int32_t>((col_in_block + i) * kNmGemmPanel);
    e[j * kNmGemmTileRows * 2] = ((real >> i) & 1) != 0 ? src[i] : 0.0f;
    std::memcpy(e + j * kNmGemmTileRows * 2 + 1, &offset, sizeof(offset));
  }
  return true;
}

// Copies `count` floats (a multiple of 4) to a 16-byte aligned dst with non-temporal stores.
void stream_copy(float* dst, const float* src, int64_t count) {
  for (int64_t i = 0; i < count; i += 4) _mm_stream_ps(dst + i, _mm_load_ps(src + i));
}

// Operands at least this large are written through a per-(block, tile) buffer and streamed out:
// they exceed the caches anyway, and every line of a run is then written whole, without the read
// for ownership that the entry-by-entry stores made (their stores were ~40 % of the packer's
// samples). 2:4 at 4096 x 4096 (64 MB packed), one thread: 17.7 -> 14.4 ms.
constexpr int64_t kStreamFloats = int64_t{2} << 20;  // 8 MB
// Floats of the largest (block, tile) run: slots_per_block <= kNmGemmMaxDepthBlock.
constexpr int64_t kMaxRunFloats = kNmGemmMaxDepthBlock * kNmGemmTileRows * 2;

// The packer for compile-time kN:kM (0: the runtime n, m). Entries go straight to their place:
// slot j of row l of a group at e + (j * 6 + l) * 2 (through `run` when streaming; 2:4 runs by
// the AVX-512 packer when `simd`). An over-full group sets `failed` and ends the tile.
template <int kN, int kM>
void pack_tiles(ConstMatrixViewF a, const BitMask& mask, int n, int m,
                const detail::NmGemmLayout& lay, float* packed, bool stream, bool simd,
                std::atomic<bool>& failed, int64_t tile) {
  const int nn = kN > 0 ? kN : n;
  const int mm = kM > 0 ? kM : m;
  const uint64_t group_mask = mm == 64 ? ~uint64_t{0} : (uint64_t{1} << mm) - 1;
  alignas(64) float run[kMaxRunFloats];
#ifdef NMS_HAVE_AVX512_KERNELS
  const float* rows[kNmGemmTileRows];
  const uint64_t* mask_rows[kNmGemmTileRows];
  if (kN == 2 && kM == 4 && simd) {
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      const int64_t r = tile * kNmGemmTileRows + l;
      rows[l] = r < a.rows() ? a.row(r) : nullptr;
      mask_rows[l] = r < a.rows() ? mask.row_words(r) : nullptr;
    }
  }
#else
  (void)simd;
#endif
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    float* const dst = packed + lay.entry(tile, lay.block_first_slot(b), 0);
    float* e = stream ? run : dst;
    const int64_t col0 = b * lay.depth_block;
    const int64_t groups = lay.block_width(b) / mm;
#ifdef NMS_HAVE_AVX512_KERNELS
    if (kN == 2 && kM == 4 && simd &&
        detail::nm_gemm_pack_run24_avx512(rows, mask_rows, col0, lay.block_width(b), e)) {
      if (stream) stream_copy(dst, run, groups * nn * kNmGemmTileRows * 2);
      continue;
    }
#endif
    for (int64_t gi = 0; gi < groups; ++gi, e += nn * kNmGemmTileRows * 2) {
      const int64_t c0 = col0 + gi * mm;
      for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
        const int64_t r = tile * kNmGemmTileRows + l;
        float* el = e + l * 2;
        if (r >= a.rows()) {  // padding rows: value 0 at offset 0, as nm_gemm_pack
          for (int j = 0; j < nn; ++j) {
            el[j * kNmGemmTileRows * 2] = 0.0f;
            std::memset(el + j * kNmGemmTileRows * 2 + 1, 0, sizeof(int32_t));
          }
          continue;
        }
        // Groups of an m dividing 64 never straddle a mask word.
        const uint64_t real = (64 % mm == 0)
                                  ? (mask.row_words(r)[c0 >> 6] >> (c0 & 63)) & group_mask
                                  : row_bits(mask.row_words(r), c0, mm);
        if (!pack_group_row<kN, kM>(a.row(r) + c0, real, gi * mm, el, nn)) {
          failed.store(true, std::memory_order_relaxed);
          return;
        }
      }
    }
    if (stream) stream_copy(dst, run, e - run);
  }
  if (stream) _mm_sfence();
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
  // The common patterns get compile-time n and m (unrolled loops, a constant group mask): 2:4 at
  // 2048 x 2048, one thread: 6.7 ms with runtime n and m, 3.6 ms compile-time, 2.8 ms with the
  // table popcount.
  using Packer = void (*)(ConstMatrixViewF, const BitMask&, int, int, const detail::NmGemmLayout&,
                          float*, bool, bool, std::atomic<bool>&, int64_t);
  Packer packer = pack_tiles<0, 0>;
  if (pattern == NmPattern{2, 4}) packer = pack_tiles<2, 4>;
  if (pattern == NmPattern{1, 4}) packer = pack_tiles<1, 4>;
  if (pattern == NmPattern{1, 2}) packer = pack_tiles<1, 2>;
  if (pattern == NmPattern{4, 8}) packer = pack_tiles<4, 8>;
  // Runs are 16-byte aligned (each is a whole number of 48-byte (slot, tile) pairs from the
  // 64-byte aligned buffer), as _mm_stream_ps needs.
  const bool stream = lay.total_floats() >= kStreamFloats;
  const bool simd = isa_active() == Isa::kAvx512;  // 2:4 runs: nm_gemm_pack24_avx512.cpp
  std::atomic<bool> failed{false};
  detail::parallel_for(lay.tiles, [&](int64_t tile) {
    packer(a, mask, n, m, lay, dst.packed.data(), stream, simd, failed, tile);
  });
  if (failed.load()) {
    // Report the first over-full group in row-major order, whatever thread found one.
    for (int64_t r = 0; r < r_count; ++r) {
      for (int64_t c0 = 0; c0 < k; c0 += m) {
        const int count = detail::popcount64(row_bits(mask.row_words(r), c0, m));
        NMS_CHECK(count <= n, "row ", r, " group ", c0 / m, " (columns ", c0, "..", c0 + m - 1,
                  ") keeps ", count, " > n (", n, ")");
      }
    }
  }
  detail::mark_shared_tiles(dst);
  detail::nm_gemm_pack_lanes(dst);
}

}  // namespace nms
