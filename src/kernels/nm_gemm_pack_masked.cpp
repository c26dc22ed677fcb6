// nm_gemm_pack_masked_into: dense A and an N:M mask -> the packed operand of nm_gemm, without the
// compressed intermediate (nm_gemm.h); nm_gemm_pack_masked_transposed_into: the same for
// A = (P W)ᵀ read from W through register-transposed stages. On an over-full group they throw
// and dst is unspecified.
// Entries are exactly those of nm_gemm_pack( nm_compress_masked(a, mask)): per group the kept
// columns in increasing order, padded with the group's lowest unkept columns at value 0 when it
// keeps fewer than n.
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <span>
#include <type_traits>

#include "core/bits.h"
#include "core/parallel.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/nm_gemm_layout.h"
#include "kernels/row_order.h"
#include "kernels/stage_transposed.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/kernels/nm_gemm.h"
#ifdef NMS_HAVE_AVX512_KERNELS
#include "kernels/nm_gemm_pack24_avx2.h"
#include "kernels/nm_gemm_pack24_avx512.h"
#include "kernels/transpose_avx2.h"
#include "kernels/transpose_avx512.h"
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

// One row's group: its mask bits `real` over values src[0 .. m): the kept in-group indices in
// increasing order, padded to n with the lowest unkept ones (value 0), as emit(slot j, value,
// in-group index). Returns false when the group keeps more than n.
template <int kN, int kM, class Emit>
inline bool pack_group_row(const float* src, uint64_t real, int n, Emit&& emit) {
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
    emit(j, ((real >> i) & 1) != 0 ? src[i] : 0.0f, i);
  }
  return true;
}

// The broadcast form's entries of one row's group: slot j at e[(j * 6) * 2], {value, offset}.
template <int kN, int kM>
inline bool pack_group_entries(const float* src, uint64_t real, int64_t col_in_block, float* e,
                               int n) {
  return pack_group_row<kN, kM>(src, real, n, [&](int j, float value, int i) {
    const auto offset = static_cast<int32_t>((col_in_block + i) * kNmGemmPanel);
    e[j * kNmGemmTileRows * 2] = value;
    std::memcpy(e + j * kNmGemmTileRows * 2 + 1, &offset, sizeof(offset));
  });
}

// 2:4 groups without SIMD: per mask nibble the two packed in-group columns (the kept ones, padded
// with the lowest unkept ones as pack_group_row pads) as i0 | i1 << 2, or 0xFF for a group keeping
// more than 2. Branch-free per group (a table load, two value loads masked to +0 where unkept, two
// 8-byte stores).
constexpr uint8_t kPair24[16] = {0x4, 0x4, 0x4, 0x4,  0x8, 0x8,  0x9,  0xFF,
                                 0xC, 0xC, 0xD, 0xFF, 0xE, 0xFF, 0xFF, 0xFF};

constexpr bool pair24_table_matches_padding_rule() {
  for (uint32_t nibble = 0; nibble < 16; ++nibble) {
    uint32_t kept = nibble;
    const int count = std::popcount(nibble);
    for (int pc = count; pc < 2; ++pc) kept |= ~kept & (kept + 1);  // as pack_group_row
    const uint32_t want = count > 2
                              ? 0xFF
                              : static_cast<uint32_t>(std::countr_zero(kept)) |
                                    static_cast<uint32_t>(std::countr_zero(kept & (kept - 1))) << 2;
    if (kPair24[nibble] != want) return false;
  }
  return true;
}
static_assert(pair24_table_matches_padding_rule());

// One entry {the value where `nibble` keeps column i, else +0; its panel offset}: a slot's 8 bytes.
inline uint64_t entry24(const float* src, uint32_t nibble, int i, int64_t col_in_block) {
  uint32_t value;
  std::memcpy(&value, src + i, sizeof(value));
  value &= 0u - ((nibble >> i) & 1u);
  const auto offset = static_cast<uint32_t>((col_in_block + i) * kNmGemmPanel);
  return value | uint64_t{offset} << 32;
}

inline bool pack_group24_entries(const float* src, uint32_t nibble, int64_t col_in_block,
                                 float* e) {
  const uint32_t pair = kPair24[nibble];
  if (pair == 0xFF) return false;
  const uint64_t e0 = entry24(src, nibble, static_cast<int>(pair & 3), col_in_block);
  const uint64_t e1 = entry24(src, nibble, static_cast<int>(pair >> 2), col_in_block);
  std::memcpy(e, &e0, sizeof(e0));
  std::memcpy(e + kNmGemmTileRows * 2, &e1, sizeof(e1));
  return true;
}
static_assert(std::endian::native == std::endian::little);

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

// One (depth block, tile) run of entries for compile-time kN:kM (0: the runtime n, m), or the part
// of it for columns [col_base, col_base + width) of the block: rows[l] points at that part's first
// column of tile row l (nullptr: a padding row), mask_rows[l] at its mask words (bit col0 + c for
// column c of the part), width a multiple of m. Slot j of row l of the part's group gi goes to
// e + ((gi · n + j) · 6 + l) · 2, its offset (col_base + column in the part) · 64 (2:4 runs by the
// AVX-512 or AVX2 packer at those levels). Returns false at an over-full group, e partly written.
template <int kN, int kM>
bool pack_run(const float* const rows[kNmGemmTileRows],
              const uint64_t* const mask_rows[kNmGemmTileRows], int n, int m, int64_t col0,
              int64_t col_base, int64_t width, Isa isa, float* e) {
  const int nn = kN > 0 ? kN : n;
  const int mm = kM > 0 ? kM : m;
  const uint64_t group_mask = mm == 64 ? ~uint64_t{0} : (uint64_t{1} << mm) - 1;
  const int64_t groups = width / mm;
#ifdef NMS_HAVE_AVX512_KERNELS
  // A SIMD packer that finds an over-full group leaves the run to the scalar code, which names it.
  if (kN == 2 && kM == 4 && isa >= Isa::kAvx2 &&
      (isa == Isa::kAvx512
           ? detail::nm_gemm_pack_run24_avx512(rows, mask_rows, col0, col_base, width, e)
           : detail::nm_gemm_pack_run24_avx2(rows, mask_rows, col0, col_base, width, e))) {
    return true;
  }
#else
  (void)isa;
#endif
  if constexpr (kN == 2 && kM == 4) {
    // Row by row, each row's block one contiguous read. 4096 x 4096 without SIMD, one thread,
    // Zen 2 (`bench_mask_pack --benchmark_filter=NmGemmPackMasked`): 22.9 ms with
    // pack_group_row group by group down the 6 rows, 21.8 with this table, 20.2 row by row
    // (a copy of the matrix: 8.8 ms; the AVX2 packer: 14.4 ms).
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      float* el = e + l * 2;
      if (rows[l] == nullptr) {  // padding rows: value 0 at offset 0, as nm_gemm_pack
        for (int64_t gi = 0; gi < 2 * groups; ++gi) {
          std::memset(el + gi * kNmGemmTileRows * 2, 0, 2 * sizeof(float));
        }
        continue;
      }
      const uint64_t* words = mask_rows[l];
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t c = col0 + 4 * gi;
        const auto nibble = static_cast<uint32_t>((words[c >> 6] >> (c & 63)) & 0xF);
        if (!pack_group24_entries(rows[l] + 4 * gi, nibble, col_base + 4 * gi,
                                  el + gi * 2 * kNmGemmTileRows * 2)) {
          return false;
        }
      }
    }
    return true;
  }
  for (int64_t gi = 0; gi < groups; ++gi, e += nn * kNmGemmTileRows * 2) {
    const int64_t c0 = col0 + gi * mm;
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      float* el = e + l * 2;
      if (rows[l] == nullptr) {  // padding rows: value 0 at offset 0, as nm_gemm_pack
        for (int j = 0; j < nn; ++j) {
          el[j * kNmGemmTileRows * 2] = 0.0f;
          std::memset(el + j * kNmGemmTileRows * 2 + 1, 0, sizeof(int32_t));
        }
        continue;
      }
      // Groups of an m dividing 64 never straddle a mask word.
      const uint64_t real = (64 % mm == 0) ? (mask_rows[l][c0 >> 6] >> (c0 & 63)) & group_mask
                                           : row_bits(mask_rows[l], c0, mm);
      if (!pack_group_entries<kN, kM>(rows[l] + gi * mm, real, col_base + gi * mm, el, nn)) {
        return false;
      }
    }
  }
  return true;
}

// Floats of a run of `width` columns.
inline int64_t run_floats(int64_t width, int n, int m) {
  return width / m * n * kNmGemmTileRows * 2;
}

// The runs of one tile, depth block by depth block, written in place (or through a buffer and
// streamed out when `stream`). An over-full group sets `failed` and ends the tile.
template <int kN, int kM>
void pack_tiles(ConstMatrixViewF a, const BitMask& mask, int n, int m,
                const detail::NmGemmLayout& lay, float* packed, bool stream, Isa isa,
                std::atomic<bool>& failed, int64_t tile) {
  alignas(64) float run[kMaxRunFloats];
  const uint64_t* mask_rows[kNmGemmTileRows];
  for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
    const int64_t r = tile * kNmGemmTileRows + l;
    mask_rows[l] = r < a.rows() ? mask.row_words(r) : nullptr;
  }
  for (int64_t b = 0; b < lay.depth_blocks; ++b) {
    const int64_t col0 = b * lay.depth_block;
    const float* rows[kNmGemmTileRows];
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      const int64_t r = tile * kNmGemmTileRows + l;
      rows[l] = r < a.rows() ? a.row(r) + col0 : nullptr;
    }
    float* const dst = packed + lay.entry(tile, lay.block_first_slot(b), 0);
    if (!pack_run<kN, kM>(rows, mask_rows, n, m, col0, 0, lay.block_width(b), isa,
                          stream ? run : dst)) {
      failed.store(true, std::memory_order_relaxed);
      return;
    }
    if (stream) stream_copy(dst, run, run_floats(lay.block_width(b), n, m));
  }
  if (stream) _mm_sfence();
}

// Chunks of the lane form staged at once per block of 32 rows: 16 (at most 16 slots per chunk:
// 2 x 16 x 16 x 32 x 4 bytes = 64 KB, in L1 / L2 while the 32 rows are read, each 16 x 64 bytes
// in a row). Chunk by chunk with the rows side by side the reads were 32 streams 16 KB apart and
// the packer took 21-89 ms at 4096 x 4096, 2:4, one thread (13-14 ms for the entries form).
constexpr int64_t kLaneStageChunks = 16;

// The lane form's slots of chunks [c_begin, c_end) for rows [row0, row0 + 32) of A (one block;
// rows from rows_end on are padding: value 0, lane 0) into the stage: slot s of chunk c, row l at
// stage[((c - c_begin) · per_chunk + s) · 32 + l], values and in-chunk lanes. row_at(r) points at
// column c_begin · 16 of row r < rows_end; the mask's words are A's (absolute columns). stage_x
// null: the values only. Returns false at an over-full group, the stage partly written.
template <int kN, int kM, class RowAt>
bool stage_lane_chunks(RowAt&& row_at, const BitMask& mask, int64_t row0, int64_t rows_end,
                       int64_t depth, int n, int m, int64_t c_begin, int64_t c_end,
                       int64_t per_chunk, float* stage_v, int32_t* stage_x) {
  const int nn = kN > 0 ? kN : n;
  const int mm = kM > 0 ? kM : m;
  const uint64_t group_mask = (uint64_t{1} << mm) - 1;  // m divides 16
  const int64_t origin = c_begin * detail::kLaneChunk;
#ifdef NMS_HAVE_AVX512_KERNELS
  // nm_gemm_lanes_for: the lane form is packed at the AVX-512 level only. Eight rows at a time.
  if (kN == 2 && kM == 4) {
    for (int64_t l0 = 0; l0 < detail::kLaneRows; l0 += 8) {
      const float* rows[8];
      const uint64_t* mask_rows[8];
      for (int k = 0; k < 8; ++k) {
        const int64_t r = row0 + l0 + k;
        rows[k] = r < rows_end ? row_at(r) : nullptr;
        mask_rows[k] = r < rows_end ? mask.row_words(r) : nullptr;
      }
      if (!detail::nm_gemm_pack_lanes24x8_avx512(rows, mask_rows, c_begin, c_end, depth, origin, l0,
                                                 stage_v, stage_x)) {
        return false;
      }
    }
    return true;
  }
#endif
  for (int64_t l = 0; l < detail::kLaneRows; ++l) {
    const int64_t r = row0 + l;
    const float* row = r < rows_end ? row_at(r) : nullptr;
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t c0 = c * detail::kLaneChunk;
      const int cols = static_cast<int>(std::min<int64_t>(detail::kLaneChunk, depth - c0));
      float* v = stage_v + (c - c_begin) * per_chunk * detail::kLaneRows;
      int32_t* x =
          stage_x != nullptr ? stage_x + (c - c_begin) * per_chunk * detail::kLaneRows : nullptr;
      int64_t s = 0;
      if (row != nullptr) {
        const uint64_t bits = row_bits(mask.row_words(r), c0, cols);
        for (int gi = 0; gi < cols / mm; ++gi, s += nn) {
          const int lane0 = gi * mm;
          const bool ok =
              pack_group_row<kN, kM>(row + (c0 - origin) + lane0, (bits >> lane0) & group_mask, nn,
                                     [&](int j, float value, int in_group) {
                                       v[(s + j) * detail::kLaneRows + l] = value;
                                       if (x != nullptr) {
                                         x[(s + j) * detail::kLaneRows + l] = lane0 + in_group;
                                       }
                                     });
          if (!ok) return false;
        }
      }
      // Padding rows, and a partial last chunk's slots past its groups (never read): 0, lane 0.
      for (; s < per_chunk; ++s) {
        v[s * detail::kLaneRows + l] = 0.0f;
        if (x != nullptr) x[s * detail::kLaneRows + l] = 0;
      }
    }
  }
  return true;
}

// Copies `count` staged slots (a multiple of 32) to the operand at `offset`: the values, and the
// lanes unless `index` is null (a values-only repack).
void copy_lane_stage(const float* stage_v, const int32_t* stage_x, int64_t count, float* values,
                     int32_t* index, int64_t offset, bool stream) {
  if (stream) {
    stream_copy(values + offset, stage_v, count);
    if (index != nullptr) {
      stream_copy(reinterpret_cast<float*>(index + offset), reinterpret_cast<const float*>(stage_x),
                  count);
    }
  } else {
    std::memcpy(values + offset, stage_v, count * sizeof(float));
    if (index != nullptr) std::memcpy(index + offset, stage_x, count * sizeof(int32_t));
  }
}

// The permute kernel's lane form of rows [32 b, 32 b + 32) (nm_gemm_lanes_layout.h), staged
// kLaneStageChunks chunks at a time and copied out (streamed when `stream`); the values only when
// `index` is null. An over-full group sets `failed` and ends the block.
template <int kN, int kM>
void pack_lane_block(ConstMatrixViewF a, const BitMask& mask, int n, int m,
                     const detail::NmGemmLaneLayout& lanes, float* values, int32_t* index,
                     bool stream, std::atomic<bool>& failed, int64_t b) {
  constexpr int64_t kStageFloats = kLaneStageChunks * detail::kLaneChunk * detail::kLaneRows;
  alignas(64) float stage_v[kStageFloats];
  alignas(64) int32_t stage_x[kStageFloats];
  for (int64_t c_begin = 0; c_begin < lanes.chunks; c_begin += kLaneStageChunks) {
    const int64_t c_end = std::min(lanes.chunks, c_begin + kLaneStageChunks);
    const auto row_at = [&](int64_t r) { return a.row(r) + c_begin * detail::kLaneChunk; };
    if (!stage_lane_chunks<kN, kM>(row_at, mask, b * detail::kLaneRows, a.rows(), a.cols(), n, m,
                                   c_begin, c_end, lanes.slots_per_chunk, stage_v,
                                   index != nullptr ? stage_x : nullptr)) {
      failed.store(true, std::memory_order_relaxed);
      return;
    }
    copy_lane_stage(stage_v, stage_x, (c_end - c_begin) * lanes.slots_per_chunk * detail::kLaneRows,
                    values, index, lanes.offset(b, c_begin, 0), stream);
  }
  if (stream) _mm_sfence();
}

// Whether some tile of 6 rows (at least 2 of them real) keeps the same columns in some depth
// block: a vector-wise mask, which the broadcast kernel's reuse path serves (on Zen 4 at --
// vectorwise 48: 1.51-1.78x against 1.38-1.86x on the permute kernel at 2:4, 2.32-3.64x against
// 2.06-2.10x at 1:4, one run beside a build).
bool tiles_share_columns(const BitMask& mask, const detail::NmGemmLayout& lay) {
  for (int64_t tile = 0; tile < lay.tiles; ++tile) {
    const int64_t r0 = tile * kNmGemmTileRows;
    const int64_t real = std::min<int64_t>(kNmGemmTileRows, mask.rows() - r0);
    for (int64_t db = 0; real >= 2 && db < lay.depth_blocks; ++db) {
      bool same = true;
      for (int64_t c = db * lay.depth_block; same && c < db * lay.depth_block + lay.block_width(db);
           c += 64) {
        const int len =
            static_cast<int>(std::min<int64_t>(64, db * lay.depth_block + lay.block_width(db) - c));
        const uint64_t first = row_bits(mask.row_words(r0), c, len);
        for (int64_t l = 1; same && l < real; ++l) {
          same = row_bits(mask.row_words(r0 + l), c, len) == first;
        }
      }
      if (same) return true;
    }
  }
  return false;
}

// Calls f(kN, kM) with compile-time n and m for the common patterns, (0, 0) for the others
// (unrolled loops, a constant group mask: 2:4 at 2048 x 2048, one thread: 6.7 ms with runtime n
// and m, 3.6 ms compile-time, 2.8 ms with the table popcount).
template <class F>
void with_pattern(NmPattern p, F&& f) {
  using std::integral_constant;
  if (p == NmPattern{2, 4}) return f(integral_constant<int, 2>{}, integral_constant<int, 4>{});
  if (p == NmPattern{1, 4}) return f(integral_constant<int, 1>{}, integral_constant<int, 4>{});
  if (p == NmPattern{1, 2}) return f(integral_constant<int, 1>{}, integral_constant<int, 2>{});
  if (p == NmPattern{4, 8}) return f(integral_constant<int, 4>{}, integral_constant<int, 8>{});
  f(integral_constant<int, 0>{}, integral_constant<int, 0>{});
}

// Names the first over-full group in row-major order, whatever thread found one.
void throw_first_overfull_group(const BitMask& mask, int n, int m) {
  for (int64_t r = 0; r < mask.rows(); ++r) {
    for (int64_t c0 = 0; c0 < mask.cols(); c0 += m) {
      const int count = detail::popcount64(row_bits(mask.row_words(r), c0, m));
      NMS_CHECK(count <= n, "row ", r, " group ", c0 / m, " (columns ", c0, "..", c0 + m - 1,
                ") keeps ", count, " > n (", n, ")");
    }
  }
}

// nm_gemm_pack_masked_transposed_into's work item: `sub_depth` consecutive rows of W (columns of
// A: 16, or a whole depth block when m does not divide 16) by the columns of up to
// kTransposedStageFloats / sub_depth / 6 tiles, transposed into a stage and packed as the parts of
// those tiles' runs: 16 rows of 4 KB read side by side. 4096 x 4096 2:4, one thread, Zen 2
// (bench_mask_pack --benchmark_filter=PackTransposed): 20.6 ms, against 32.1 for transpose_into
// then the pack (a pack of W itself: 14.3); the staging alone 12.7 ms. Stages of 48 to 192 columns
// by a whole depth block of 128 rows took 22-26 ms. Stages of 32 to 256 KB measured alike (16 KB
// +1.2 ms, 8 KB +3), so did 32 or 64 rows (128 rows +1.5 ms); prefetching the rows 128-1024
// bytes ahead left the staging at 12.9-13.5 ms.
constexpr int64_t kTransposedStageFloats = 16384;  // 64 KB: 1020 x 16 at 2:4

struct TransposedItems {
  int64_t sub_depth = 0;    // columns of A per part
  int64_t parts = 0;        // parts per depth block
  int64_t stage_tiles = 0;  // tiles per item
  int64_t segments = 0;     // items per part
  TransposedItems(const detail::NmGemmLayout& lay)
      : sub_depth(16 % lay.m == 0 ? 16 : lay.depth_block),
        parts(lay.depth_block / sub_depth),
        stage_tiles(kTransposedStageFloats / sub_depth / kNmGemmTileRows),
        segments((lay.tiles + stage_tiles - 1) / stage_tiles) {}
  int64_t count(const detail::NmGemmLayout& lay) const {
    return lay.depth_blocks * parts * segments;
  }
};

// Item `item` of nm_gemm_pack_masked_transposed_into: part q of depth block b for one segment of
// tiles, from a stage of those rows of W transposed (the same entries as pack_tiles on the
// transposed matrix).
template <int kN, int kM>
void pack_transposed_item(ConstMatrixViewF w, std::span<const int64_t> order, const BitMask& mask_t,
                          int n, int m, const detail::NmGemmLayout& lay,
                          const TransposedItems& items, float* packed, bool stream, Isa isa,
                          std::atomic<bool>& failed, int64_t item) {
  alignas(64) float stage[kTransposedStageFloats];
  alignas(64) float run[kMaxRunFloats];
  const int64_t segment = item % items.segments;
  const int64_t q = item / items.segments % items.parts;
  const int64_t b = item / items.segments / items.parts;
  const int64_t col_base = q * items.sub_depth;
  const int64_t width = std::min(items.sub_depth, lay.block_width(b) - col_base);
  if (width <= 0) return;  // a part past a narrower last block
  const int64_t col0 = b * lay.depth_block + col_base;
  const int64_t t0 = segment * items.stage_tiles;
  const int64_t t1 = std::min(lay.tiles, t0 + items.stage_tiles);
  const int64_t j0 = t0 * kNmGemmTileRows;
  const int64_t j1 = std::min(lay.rows, t1 * kNmGemmTileRows);
  detail::stage_transposed(w, order, j0, j1, col0, width, items.sub_depth, isa, stage);
  const int64_t first_slot = lay.block_first_slot(b) + col_base / m * n;
  for (int64_t tile = t0; tile < t1; ++tile) {
    const float* rows[kNmGemmTileRows];
    const uint64_t* mask_rows[kNmGemmTileRows];
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      const int64_t r = tile * kNmGemmTileRows + l;
      rows[l] = r < lay.rows ? stage + (r - j0) * items.sub_depth : nullptr;
      mask_rows[l] = r < lay.rows ? mask_t.row_words(r) : nullptr;
    }
    float* const dst = packed + lay.entry(tile, first_slot, 0);
    if (!pack_run<kN, kM>(rows, mask_rows, n, m, col0, col_base, width, isa, stream ? run : dst)) {
      failed.store(true, std::memory_order_relaxed);
      return;
    }
    if (stream) stream_copy(dst, run, run_floats(width, n, m));
  }
  if (stream) _mm_sfence();
}

// The lane form of A = (P W)ᵀ without a transposed copy of W: item = (chunk c, segment of
// kLaneSegmentBlocks blocks). The chunk's 16 rows of W (A's columns 16 c ..) are transposed,
// by the segment's columns, into a stage of [A rows][16] (16 rows of 4 KB read side by side, as
// the entries form's items), and each block's slots of that chunk are staged and copied out (1
// KB of values and 1 KB of lanes per block at 2:4). transpose_into then pack_lanes, which wrote
// and read back a whole transposed copy, took 18.5 ms at 4096 x 4096 2:4 (16.2 with a
// permutation) against 14.0 (11.6) this way; packing W itself takes 9.1 (one thread, Zen 4,
// `bench_mask_pack --benchmark_filter=NmGemmPack`).
constexpr int64_t kLaneSegmentBlocks =
    kTransposedStageFloats / detail::kLaneChunk / detail::kLaneRows;  // 32 blocks, 1024 rows

template <int kN, int kM>
void pack_lane_transposed_item(ConstMatrixViewF w, std::span<const int64_t> order,
                               const BitMask& mask_t, int n, int m,
                               const detail::NmGemmLaneLayout& lanes, float* values, int32_t* index,
                               bool stream, Isa isa, std::atomic<bool>& failed, int64_t item) {
  alignas(64) float stage[kTransposedStageFloats];
  alignas(64) float stage_v[detail::kLaneChunk * detail::kLaneRows];
  alignas(64) int32_t stage_x[detail::kLaneChunk * detail::kLaneRows];
  const int64_t segments = (lanes.blocks + kLaneSegmentBlocks - 1) / kLaneSegmentBlocks;
  const int64_t c = item / segments;
  const int64_t b0 = item % segments * kLaneSegmentBlocks;
  const int64_t b1 = std::min(lanes.blocks, b0 + kLaneSegmentBlocks);
  const int64_t j0 = b0 * detail::kLaneRows;
  const int64_t j1 = std::min(lanes.rows, b1 * detail::kLaneRows);
  const int64_t col0 = c * detail::kLaneChunk;
  const int64_t width = std::min(detail::kLaneChunk, lanes.depth - col0);
  detail::stage_transposed(w, order, j0, j1, col0, width, detail::kLaneChunk, isa, stage);
  const auto row_at = [&](int64_t r) { return stage + (r - j0) * detail::kLaneChunk; };
  const int64_t count = lanes.slots_per_chunk * detail::kLaneRows;
  for (int64_t b = b0; b < b1; ++b) {
    if (!stage_lane_chunks<kN, kM>(row_at, mask_t, b * detail::kLaneRows, lanes.rows, lanes.depth,
                                   n, m, c, c + 1, lanes.slots_per_chunk, stage_v,
                                   index != nullptr ? stage_x : nullptr)) {
      failed.store(true, std::memory_order_relaxed);
      return;
    }
    copy_lane_stage(stage_v, stage_x, count, values, index, lanes.offset(b, c, 0), stream);
  }
  if (stream) _mm_sfence();
}

void check_packable(int64_t rows, int64_t cols, const BitMask& mask, NmPattern pattern,
                    const char* what) {
  pattern.validate();
  NMS_CHECK(mask.rows() == rows && mask.cols() == cols, "mask shape (", mask.rows(), " x ",
            mask.cols(), ") differs from the ", what, " (", rows, " x ", cols, ")");
  NMS_CHECK(cols % pattern.m == 0, "m (", pattern.m, ") does not divide the grouped axis (", cols,
            ")");
}

void set_shape(NmGemmOperand& dst, int64_t rows, int64_t depth, NmPattern pattern) {
  dst.rows = rows;
  dst.depth = depth;
  dst.pattern = pattern;
  dst.depth_block = detail::nm_gemm_depth_block(pattern.m);
}

// Whether dst holds the lane form of this shape and pattern packed from `mask` (its lane indices
// then stand as they are).
bool lanes_current(const NmGemmOperand& dst, const BitMask& mask, NmPattern pattern,
                   const detail::NmGemmLaneLayout& lanes) {
  return dst.rows == lanes.rows && dst.depth == lanes.depth && dst.pattern == pattern &&
         dst.packed.empty() && dst.lane_values.size() == lanes.total() &&
         dst.lane_index.size() == lanes.total() && dst.lane_mask == mask;
}

// The permute kernel's form only, straight from A and the mask (its 2:4 rows by the AVX-512
// packer): 21 ms at 4096 x 4096, 2:4, one thread, against 13 ms for the entries form (27 ms with
// the scalar group loop; bench_mask_pack --benchmark_filter=NmGemmPackMasked). Before, the lanes
// came from the entries in a second pass that read them back from memory (37 ms more per training
// step of the 4096 MLP, and 64 MB more per operand). The values only when the lanes are current
// (`values_only`: lanes_current, as the caller found it), else both, and then dst.lane_mask =
// mask. `pack_items` items of pack_item(kn, km, item, values, index, stream, failed); index null
// for the values only.
template <class PackItem>
void pack_lanes(const BitMask& mask, NmPattern pattern, const detail::NmGemmLaneLayout& lanes,
                bool values_only, int64_t pack_items, NmGemmOperand& dst, PackItem&& pack_item) {
  set_shape(dst, lanes.rows, lanes.depth, pattern);
  const bool stream = lanes.total() >= kStreamFloats;  // as the entries form
  if (dst.lane_values.size() != lanes.total()) {
    dst.lane_values.resize_for_overwrite(lanes.total());
    dst.lane_index.resize_for_overwrite(lanes.total());
  }
  if (!values_only) dst.lane_mask = mask;  // copied into its storage; forgotten on a failure
  int32_t* const index = values_only ? nullptr : dst.lane_index.data();
  std::atomic<bool> failed{false};
  with_pattern(pattern, [&](auto kn, auto km) {
    detail::parallel_for(pack_items, [&](int64_t item) {
      pack_item(kn, km, item, dst.lane_values.data(), index, stream, failed);
    });
  });
  if (failed.load()) {
    dst.lane_mask = BitMask();
    throw_first_overfull_group(mask, pattern.n, pattern.m);
  }
  dst.packed = AlignedBuffer<float>();
  dst.shared = AlignedBuffer<uint8_t>();
}

// The entries form: `pack_items` items, pack_item(kn, km, item, packed, stream, isa, failed).
template <class PackItem>
void pack_entries(const BitMask& mask, NmPattern pattern, const detail::NmGemmLayout& lay,
                  int64_t pack_items, NmGemmOperand& dst, PackItem&& pack_item) {
  set_shape(dst, lay.rows, lay.depth, pattern);
  if (dst.packed.size() != lay.total_floats()) dst.packed.resize_for_overwrite(lay.total_floats());
  // Runs are 16-byte aligned (each is a whole number of 48-byte (slot, tile) pairs from the
  // 64-byte aligned buffer), as _mm_stream_ps needs.
  const bool stream = lay.total_floats() >= kStreamFloats;
  const Isa isa = isa_active();  // 2:4 runs: nm_gemm_pack24_avx512.cpp, nm_gemm_pack24_avx2.cpp
  std::atomic<bool> failed{false};
  with_pattern(pattern, [&](auto kn, auto km) {
    detail::parallel_for(pack_items, [&](int64_t item) {
      pack_item(kn, km, item, dst.packed.data(), stream, isa, failed);
    });
  });
  if (failed.load()) throw_first_overfull_group(mask, pattern.n, pattern.m);
  detail::mark_shared_tiles(dst);
  dst.lane_values = AlignedBuffer<float>();
  dst.lane_index = AlignedBuffer<int32_t>();
  dst.lane_mask = BitMask();
}

}  // namespace

void nm_gemm_pack_masked_into(ConstMatrixViewF a, const BitMask& mask, NmPattern pattern,
                              NmGemmOperand& dst) {
  check_packable(a.rows(), a.cols(), mask, pattern, "matrix");
  const detail::NmGemmLayout lay(a.rows(), a.cols(), pattern.n, pattern.m,
                                 detail::nm_gemm_depth_block(pattern.m));
  const detail::NmGemmLaneLayout lanes(a.rows(), a.cols(), pattern.n, pattern.m);
  const bool lanes_form = detail::nm_gemm_lanes_for(pattern);
  const bool values_only = lanes_form && lanes_current(dst, mask, pattern, lanes);
  if (lanes_form && (values_only || !tiles_share_columns(mask, lay))) {
    pack_lanes(mask, pattern, lanes, values_only, lanes.blocks, dst,
               [&](auto kn, auto km, int64_t b, float* values, int32_t* index, bool stream,
                   std::atomic<bool>& failed) {
                 pack_lane_block<kn(), km()>(a, mask, pattern.n, pattern.m, lanes, values, index,
                                             stream, failed, b);
               });
    return;
  }
  pack_entries(mask, pattern, lay, lay.tiles, dst,
               [&](auto kn, auto km, int64_t tile, float* packed, bool stream, Isa isa,
                   std::atomic<bool>& failed) {
                 pack_tiles<kn(), km()>(a, mask, pattern.n, pattern.m, lay, packed, stream, isa,
                                        failed, tile);
               });
}

void detail::stage_transposed(ConstMatrixViewF w, std::span<const int64_t> order, int64_t j0,
                              int64_t j1, int64_t col0, int64_t width, int64_t ld, Isa isa,
                              float* stage) {
  const auto src_row = [&](int64_t c) {
    const int64_t k = col0 + c;
    return w.row(order.empty() ? k : order[k]);
  };
  int64_t c = 0;
#ifdef NMS_HAVE_AVX512_KERNELS
  if (isa >= Isa::kAvx2) {
    for (; c + 16 <= width; c += 16) {
      const float* base[16];
      for (int i = 0; i < 16; ++i) base[i] = src_row(c + i);
      int64_t j = j0;
      for (; j + 16 <= j1; j += 16) {
        const float* rows[16];
        for (int i = 0; i < 16; ++i) rows[i] = base[i] + j;
        float* out = stage + (j - j0) * ld + c;
        isa == Isa::kAvx512 ? detail::transpose16_avx512(rows, out, ld, false)
                            : detail::transpose16_avx2(rows, out, ld, false);
      }
      for (; j < j1; ++j) {
        for (int i = 0; i < 16; ++i) stage[(j - j0) * ld + c + i] = base[i][j];
      }
    }
  }
#else
  (void)isa;
#endif
  for (; c < width; ++c) {
    const float* row = src_row(c);
    for (int64_t j = j0; j < j1; ++j) stage[(j - j0) * ld + c] = row[j];
  }
}

void nm_gemm_pack_masked_transposed_into(ConstMatrixViewF w, std::span<const int64_t> order,
                                         const BitMask& mask_t, NmPattern pattern,
                                         NmGemmOperand& dst) {
  detail::check_row_order(order, w.rows(), "nm_gemm_pack_masked_transposed_into");
  const int64_t depth = order.empty() ? w.rows() : static_cast<int64_t>(order.size());
  check_packable(w.cols(), depth, mask_t, pattern, "transposed matrix");
  const detail::NmGemmLayout lay(w.cols(), depth, pattern.n, pattern.m,
                                 detail::nm_gemm_depth_block(pattern.m));
  const detail::NmGemmLaneLayout lanes(w.cols(), depth, pattern.n, pattern.m);
  const bool lanes_form = detail::nm_gemm_lanes_for(pattern);
  const bool values_only = lanes_form && lanes_current(dst, mask_t, pattern, lanes);
  if (lanes_form && (values_only || !tiles_share_columns(mask_t, lay))) {
    const int64_t segments = (lanes.blocks + kLaneSegmentBlocks - 1) / kLaneSegmentBlocks;
    const Isa isa = isa_active();
    pack_lanes(mask_t, pattern, lanes, values_only, lanes.chunks * segments, dst,
               [&](auto kn, auto km, int64_t item, float* values, int32_t* index, bool stream,
                   std::atomic<bool>& failed) {
                 pack_lane_transposed_item<kn(), km()>(w, order, mask_t, pattern.n, pattern.m,
                                                       lanes, values, index, stream, isa, failed,
                                                       item);
               });
    return;
  }
  const TransposedItems items(lay);
  pack_entries(mask_t, pattern, lay, items.count(lay), dst,
               [&](auto kn, auto km, int64_t item, float* packed, bool stream, Isa isa,
                   std::atomic<bool>& failed) {
                 pack_transposed_item<kn(), km()>(w, order, mask_t, pattern.n, pattern.m, lay,
                                                  items, packed, stream, isa, failed, item);
               });
}

}  // namespace nms
