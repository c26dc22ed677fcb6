#include "nmsparse/format/compressed_nm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/bits.h"
#include "core/parallel.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

// Mask with the lowest `count` bits set (count in [0, 64]).
inline uint64_t low_bits(int count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

// The `count` (<= 8) bits at bit offset `bit` of a byte row whose bit length covers them.
inline int read_bits(const uint8_t* row, int64_t bit, int count) {
  if (count == 0) return 0;
  uint32_t v = row[bit >> 3];
  if ((bit & 7) + count > 8) v |= static_cast<uint32_t>(row[(bit >> 3) + 1]) << 8;
  return static_cast<int>((v >> (bit & 7)) & ((1u << count) - 1));
}

using detail::popcount64;

// Pads `kept` (popcount pc <= n) with its lowest clear bits until it has n set bits.
inline uint64_t pad_kept(uint64_t kept, int pc, int n) {
  for (; pc < n; ++pc) kept |= ~kept & (kept + 1);  // lowest clear bit
  return kept;
}

// Bits [pos, pos + len) of a packed bit row (LSB first within 64-bit words), len in [1, 64].
inline uint64_t extract_bits(const uint64_t* words, int64_t pos, int len) {
  const int64_t w = pos >> 6;
  const int shift = static_cast<int>(pos & 63);
  uint64_t bits = words[w] >> shift;
  if (shift + len > 64) bits |= words[w + 1] << (64 - shift);
  return bits & low_bits(len);
}

// ORs the low `count` (<= 8) bits of `value` into a byte row at bit offset `bit`.
inline void or_bits(uint8_t* row, int64_t bit, uint32_t value, int count) {
  if (count == 0) return;
  const uint32_t v = value << (bit & 7);
  row[bit >> 3] = static_cast<uint8_t>(row[bit >> 3] | v);
  if ((v >> 8) != 0) row[(bit >> 3) + 1] = static_cast<uint8_t>(row[(bit >> 3) + 1] | (v >> 8));
}

static_assert(std::endian::native == std::endian::little,
              "the index stream is little-endian; big-endian hosts need byte swaps here");

inline uint32_t load_bits(const float* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof(u));
  return u;
}
inline void store_bits(float* p, uint32_t u) {
  std::memcpy(p, &u, sizeof(u));
}
// 0 for +0.0 and -0.0, the bits unchanged otherwise (integer form of canonical_zero).
inline uint32_t canonical_zero_bits(uint32_t u) {
  return (u << 1) == 0 ? 0 : u;
}

// Sequential LSB-first bit writer for one index row. `put` takes at most 32 bits. Only bytes whose
// bits are all known are written, so it never writes past ceil(total_bits / 8) bytes.
class BitWriter {
 public:
  explicit BitWriter(uint8_t* dst) : dst_(dst) {}
  void put(uint32_t bits, int count) {
    acc_ |= uint64_t{bits} << fill_;
    fill_ += count;
    if (fill_ >= 32) {
      const auto word = static_cast<uint32_t>(acc_);
      std::memcpy(dst_, &word, 4);
      dst_ += 4;
      acc_ >>= 32;
      fill_ -= 32;
    }
  }
  void finish() {
    for (; fill_ > 0; fill_ -= 8) {
      *dst_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
    }
  }

 private:
  uint8_t* dst_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// Sequential LSB-first bit reader for one index row of `bytes` bytes; never reads past it.
// `get` takes at most 32 bits.
class BitReader {
 public:
  BitReader(const uint8_t* src, int64_t bytes) : src_(src), end_(src + bytes) {}
  uint32_t get(int count) {
    if (fill_ < count) refill();
    const auto v = static_cast<uint32_t>(acc_ & low_bits(count));
    acc_ >>= count;
    fill_ -= count;
    return v;
  }

 private:
  void refill() {
    if (end_ - src_ >= 4) {
      uint32_t word;
      std::memcpy(&word, src_, 4);
      acc_ |= uint64_t{word} << fill_;
      src_ += 4;
      fill_ += 32;
      return;
    }
    for (; fill_ <= 56 && src_ < end_; fill_ += 8) acc_ |= uint64_t{*src_++} << fill_;
    if (fill_ <= 56) fill_ = 64;  // past the end: zeros (callers never use them)
  }
  const uint8_t* src_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

void check_pattern(NmPattern p, const char* func) {
  if (!(p.m >= 1 && p.m <= kMaxGroupSize && p.n >= 1 && p.n <= p.m)) {
    detail::throw_error(func, detail::concat("invalid pattern ", p.n, ":", p.m,
                                             " (need 1 <= n <= m <= ", kMaxGroupSize, ")"));
  }
}

void check_axis(NmAxis axis, const char* func) {
  if (axis != NmAxis::kRows && axis != NmAxis::kCols) {
    detail::throw_error(func, detail::concat("invalid axis value ", static_cast<int>(axis)));
  }
}

// Shapes `c` for a rows x cols matrix after the shared argument checks. Buffers of the right size
// are reused (values are then fully overwritten by the packers; indices are zeroed only where
// the packer ORs bits in, i.e. for kCols); others are reallocated.
void prepare(CompressedNm& c, int64_t rows, int64_t cols, NmPattern pattern, NmAxis axis,
             const char* func) {
  check_pattern(pattern, func);
  check_axis(axis, func);
  c.rows = rows;
  c.cols = cols;
  c.pattern = pattern;
  c.axis = axis;
  if (c.axis_length() % pattern.m != 0) {
    const int64_t length = c.axis_length();
    c = CompressedNm{};
    detail::throw_error(func, detail::concat(axis == NmAxis::kRows ? "cols (" : "rows (", length,
                                             ") is not a multiple of m (", pattern.m, ") for ",
                                             pattern.to_string(), " along axis ", axis_name(axis)));
  }
  const int64_t values = detail::mul_checked(c.value_rows(), c.value_cols(), "compressed values");
  if (c.values.size() != values) c.values.resize_for_overwrite(values);  // packers write all
  if (c.indices.size() != c.index_bytes()) {
    c.indices.resize(c.index_bytes());
  } else if (axis == NmAxis::kCols && !c.indices.empty()) {
    std::memset(c.indices.data(), 0, static_cast<size_t>(c.indices.size()));
  }
}

// Runs body(begin, end) over [0, count) in chunks of about `target` work units (each item costs
// `item_work`), in parallel. Chunk boundaries depend only on the sizes, never on the thread count.
template <class Body>
void for_chunks(int64_t count, int64_t item_work, Body&& body) {
  constexpr int64_t kTargetWork = int64_t{1} << 16;
  const int64_t per_chunk = std::max<int64_t>(1, kTargetWork / std::max<int64_t>(1, item_work));
  const int64_t chunks = (count + per_chunk - 1) / per_chunk;
  detail::parallel_for(chunks, [&](int64_t chunk) {
    const int64_t begin = chunk * per_chunk;
    body(begin, std::min(count, begin + per_chunk));
  });
}

// ---------------------------------------------------------------------------------------------
// axis kRows, nm_compress

// Bit i set iff g[i] is nonzero (NaN, Inf and denormals count; +-0.0 does not), for M in
// {2, 4, 8, 16, ...}. SSE2 is part of the x86-64 baseline, so no dispatch is needed.
template <int M>
inline uint64_t nonzero_mask(const float* g) {
#if defined(__SSE2__)
  if constexpr (M % 4 == 0) {
    const __m128 zero = _mm_setzero_ps();
    uint64_t mask = 0;
    for (int i = 0; i < M; i += 4) {
      const __m128 v = _mm_loadu_ps(g + i);
      mask |= static_cast<uint64_t>(_mm_movemask_ps(_mm_cmpneq_ps(v, zero))) << i;
    }
    return mask;
  }
#endif
  uint64_t mask = 0;
  for (int i = 0; i < M; ++i) mask |= static_cast<uint64_t>((load_bits(g + i) << 1) != 0) << i;
  return mask;
}

inline uint64_t nonzero_mask_any(const float* g, int m) {
  uint64_t mask = 0;
  int i = 0;
  for (; i + 4 <= m; i += 4) mask |= nonzero_mask<4>(g + i) << i;
  for (; i < m; ++i) mask |= static_cast<uint64_t>((load_bits(g + i) << 1) != 0) << i;
  return mask;
}

// Per-pattern table for m in {2, 4, 8}, indexed by the kept mask (before padding) of a "block" of
// 8 / m consecutive groups = 8 floats: 2 groups of 2:4, 4 groups of 1:2, 1 group of 4:8. Stepping
// 8 floats at a time halves the lookups and bit-writer calls of 2:4 against one group per step
// (2:4 pack into reused buffers ~4.4 -> ~5 GB/s here, within the noise of this shared machine).
struct SmallLut {
  struct Entry {
    std::array<uint8_t, 8> pos;  // kept positions after padding, ascending, within the block
    uint32_t bits;               // the block's packed indices (8/m*n slots, <= 24 bits)
    uint32_t keep;               // bit k set: slot k is really kept (clear: padding, stores +0.0)
    uint32_t ok;                 // every group of the block has popcount <= n
    uint32_t unused;
  };
  int groups = 1;                   // groups per table entry: 8 / m for `block`, 1 for `single`
  std::array<Entry, 256> block{};   // indexed by 8 mask bits
  std::array<Entry, 256> single{};  // indexed by one group's m mask bits (for a row's tail)
};

void fill_lut(std::array<SmallLut::Entry, 256>& table, NmPattern p, int groups) {
  const int b = p.index_bits();
  const int bits_in = groups * p.m;
  for (uint32_t mask = 0; mask < (1u << bits_in); ++mask) {
    SmallLut::Entry& e = table[mask];
    e.ok = 1;
    int slot = 0;
    for (int g = 0; g < groups; ++g) {
      const uint64_t group_mask = (mask >> (g * p.m)) & low_bits(p.m);
      const int pc = popcount64(group_mask);
      if (pc > p.n) {
        e.ok = 0;
        break;
      }
      uint64_t kept = pad_kept(group_mask, pc, p.n);
      for (int k = 0; k < p.n; ++k, ++slot) {
        const int i = std::countr_zero(kept);
        kept &= kept - 1;
        e.pos[static_cast<size_t>(slot)] = static_cast<uint8_t>(g * p.m + i);
        e.bits |= static_cast<uint32_t>(i) << (slot * b);
        if ((group_mask >> i) & 1) e.keep |= 1u << slot;
      }
    }
  }
}

SmallLut make_small_lut(NmPattern p) {
  SmallLut lut;
  lut.groups = 8 / p.m;
  fill_lut(lut.block, p, lut.groups);
  fill_lut(lut.single, p, 1);
  return lut;
}

// Stores the `slots` slots of one LUT entry read from `p` (the block or group start).
template <bool MASKED>
inline void store_slots(const float* p, const SmallLut::Entry& e, int slots, float* vals) {
  for (int k = 0; k < slots; ++k) {
    uint32_t u = canonical_zero_bits(load_bits(p + e.pos[static_cast<size_t>(k)]));
    // Unmasked: padding positions hold +-0.0, already +0.0 here. Masked: they may not.
    if (MASKED) u &= 0u - ((e.keep >> k) & 1u);
    store_bits(vals + k, u);
  }
}

// Packs one dense row with m == M in {2, 4, 8} and n == N (0: runtime n). MASKED: the kept set is
// `words` (a BitMask row); otherwise the nonzeros. Returns false at the first group over the limit
// (outputs are then partial; the caller throws).
template <int M, int N, bool MASKED>
bool pack_row_small(const float* src, const uint64_t* words, int64_t groups, int n_runtime, int b,
                    const SmallLut& lut, float* vals, uint8_t* idx) {
  constexpr int kGroupsPerBlock = 8 / M;
  const int n = N != 0 ? N : n_runtime;
  const int block_slots = kGroupsPerBlock * n;
  const int block_bits = block_slots * b;
  const auto* mask_bytes = reinterpret_cast<const uint8_t*>(words);  // little-endian words
  BitWriter writer(idx);
  const int64_t blocks = groups / kGroupsPerBlock;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const float* p = src + blk * 8;
    const uint64_t mask = MASKED ? mask_bytes[blk] : nonzero_mask<8>(p);
    const SmallLut::Entry& e = lut.block[mask];
    if (e.ok == 0) [[unlikely]] {
      return false;
    }
    store_slots<MASKED>(p, e, block_slots, vals);
    vals += block_slots;
    writer.put(e.bits, block_bits);
  }
  for (int64_t g = blocks * kGroupsPerBlock; g < groups; ++g) {  // the row's last < 8/M groups
    const float* p = src + g * M;
    const uint64_t mask = MASKED ? extract_bits(words, g * M, M) : nonzero_mask_any(p, M);
    const SmallLut::Entry& e = lut.single[mask];
    if (e.ok == 0) [[unlikely]] {
      return false;
    }
    store_slots<MASKED>(p, e, n, vals);
    vals += n;
    writer.put(e.bits, n * b);
  }
  writer.finish();
  return true;
}

// Any m in [1, 64]; same contract as pack_row_small.
template <bool MASKED>
bool pack_row_generic(const float* src, const uint64_t* words, int64_t groups, int n, int m, int b,
                      float* vals, uint8_t* idx) {
  BitWriter writer(idx);
  for (int64_t g = 0; g < groups; ++g) {
    const float* p = src + g * m;
    const uint64_t real = MASKED ? extract_bits(words, g * m, m) : nonzero_mask_any(p, m);
    const int pc = popcount64(real);
    if (pc > n) [[unlikely]] {
      return false;
    }
    uint64_t kept = pad_kept(real, pc, n);
    for (int k = 0; k < n; ++k) {
      const int i = std::countr_zero(kept);
      kept &= kept - 1;
      uint32_t u = canonical_zero_bits(load_bits(p + i));
      if (MASKED) u &= 0u - static_cast<uint32_t>((real >> i) & 1);
      store_bits(vals + k, u);
      writer.put(static_cast<uint32_t>(i), b);
    }
    vals += n;
  }
  writer.finish();
  return true;
}

// Number of kept entries of group g of value row v: nonzeros of `dense`, or set bits of `mask`.
int group_count(ConstMatrixViewF dense, const BitMask* mask, NmAxis axis, int m, int64_t v,
                int64_t g) {
  int count = 0;
  for (int i = 0; i < m; ++i) {
    const int64_t r = axis == NmAxis::kRows ? v : g * m + i;
    const int64_t c = axis == NmAxis::kRows ? g * m + i : v;
    count += mask != nullptr ? (mask->get(r, c) ? 1 : 0) : (dense(r, c) != 0.0f ? 1 : 0);
  }
  return count;
}

// Throws the message for the first over-full group in value-row order. Only called after a
// failure was detected, so it may be slow.
[[noreturn]] void throw_first_overfull(ConstMatrixViewF dense, const BitMask* mask, NmPattern p,
                                       NmAxis axis, int64_t value_rows, int64_t groups) {
  for (int64_t v = 0; v < value_rows; ++v) {
    for (int64_t g = 0; g < groups; ++g) {
      const int count = group_count(dense, mask, axis, p.m, v, g);
      if (count > p.n) {
        detail::throw_error(
            mask != nullptr ? "nm_compress_masked" : "nm_compress",
            detail::concat(
                mask != nullptr ? "mask " : "", axis == NmAxis::kRows ? "row " : "column ", v,
                ", group ", g, axis == NmAxis::kRows ? " (cols " : " (rows ", g * p.m, "..",
                g * p.m + p.m - 1, ") has ", count, mask != nullptr ? " set bits" : " nonzeros",
                "; pattern ", p.to_string(), " allows at most ", p.n));
      }
    }
  }
  NMS_ASSERT(false, "an over-full group was reported but none was found");
}

template <bool MASKED>
bool pack_row(const float* src, const uint64_t* words, const CompressedNm& c, const SmallLut& lut,
              float* vals, uint8_t* idx) {
  const NmPattern p = c.pattern;
  const int b = p.index_bits();
  const int64_t groups = c.groups_per_row();
  switch (p.m) {
    case 2:
      return p.n == 1 ? pack_row_small<2, 1, MASKED>(src, words, groups, 1, b, lut, vals, idx)
                      : pack_row_small<2, 2, MASKED>(src, words, groups, 2, b, lut, vals, idx);
    case 4:
      return p.n == 2 ? pack_row_small<4, 2, MASKED>(src, words, groups, 2, b, lut, vals, idx)
                      : pack_row_small<4, 0, MASKED>(src, words, groups, p.n, b, lut, vals, idx);
    case 8:
      return p.n == 4 ? pack_row_small<8, 4, MASKED>(src, words, groups, 4, b, lut, vals, idx)
                      : pack_row_small<8, 0, MASKED>(src, words, groups, p.n, b, lut, vals, idx);
    default:
      return pack_row_generic<MASKED>(src, words, groups, p.n, p.m, b, vals, idx);
  }
}

// axis kRows, masked (`mask` set) or not: one pass per row, rows in parallel.
void compress_rows(ConstMatrixViewF dense, const BitMask* mask, CompressedNm& c) {
  const NmPattern p = c.pattern;
  const int64_t vcols = c.value_cols();
  const int64_t row_bytes = c.index_row_bytes();
  SmallLut lut;
  if (p.m == 2 || p.m == 4 || p.m == 8) lut = make_small_lut(p);
  std::atomic<bool> failed{false};
  for_chunks(c.rows, std::max<int64_t>(1, c.cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* src = dense.row(r);
      float* vals = c.values.data() + r * vcols;
      uint8_t* idx = c.indices.data() + r * row_bytes;
      const bool ok = mask != nullptr ? pack_row<true>(src, mask->row_words(r), c, lut, vals, idx)
                                      : pack_row<false>(src, nullptr, c, lut, vals, idx);
      if (!ok) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
    }
  });
  if (failed.load())
    throw_first_overfull(dense, mask, p, NmAxis::kRows, c.rows, c.groups_per_row());
}

// ---------------------------------------------------------------------------------------------
// axis kCols: one group at a time through a small transposed tile.

// Dense columns per tile. Each tile walks all dense rows at a stride of ld floats, so wide tiles
// amortise the TLB and cache misses: 32 -> 256 took 2:4 kCols from 0.3 to ~1 GB/s here.
constexpr int64_t kColBlock = 256;

// Stores one group (m contiguous floats in `g`; `kept` has exactly n bits set, `real` the subset
// really kept, the rest is padding and stores +0.0) at `vals` (n floats) and at bit `bit` of the
// index row `idx_row`.
inline void store_group(float* vals, uint8_t* idx_row, int64_t bit, const float* g, uint64_t kept,
                        uint64_t real, int n, int b) {
  for (int k = 0; k < n; ++k) {
    const int i = std::countr_zero(kept);
    kept &= kept - 1;
    uint32_t u = canonical_zero_bits(load_bits(g + i));
    u &= 0u - static_cast<uint32_t>((real >> i) & 1);
    store_bits(vals + k, u);
    or_bits(idx_row, bit, static_cast<uint32_t>(i), b);
    bit += b;
  }
}

// axis kCols, masked (`mask` set) or not. Tiles of m dense rows x kColBlock dense columns are
// transposed into `tile` so that each value row's group is contiguous; each chunk owns whole
// value rows (dense columns), so the OR-ed index bytes never race.
void compress_cols(ConstMatrixViewF dense, const BitMask* mask, CompressedNm& c) {
  const NmPattern p = c.pattern;
  const int n = p.n;
  const int m = p.m;
  const int b = p.index_bits();
  const int64_t groups = c.groups_per_row();
  const int64_t vcols = c.value_cols();
  const int64_t row_bytes = c.index_row_bytes();
  std::atomic<bool> failed{false};
  const int64_t blocks = (c.cols + kColBlock - 1) / kColBlock;
  for_chunks(blocks, std::max<int64_t>(1, c.rows * kColBlock), [&](int64_t begin, int64_t end) {
    std::vector<float> tile(static_cast<size_t>(kColBlock * m));
    std::array<uint64_t, kColBlock> tile_mask{};
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t c0 = blk * kColBlock;
      const int64_t width = std::min(kColBlock, c.cols - c0);
      for (int64_t g = 0; g < groups; ++g) {
        tile_mask.fill(0);
        for (int i = 0; i < m; ++i) {
          const int64_t r = g * m + i;
          const float* src = dense.row(r) + c0;
          for (int64_t j0 = 0; j0 < width; j0 += 64) {
            const int64_t j1 = std::min(width, j0 + 64);
            const uint64_t row_bits = mask != nullptr ? extract_bits(mask->row_words(r), c0 + j0,
                                                                     static_cast<int>(j1 - j0))
                                                      : 0;
            for (int64_t j = j0; j < j1; ++j) {
              tile[static_cast<size_t>(j * m + i)] = src[j];
              const uint64_t keep = mask != nullptr ? (row_bits >> (j - j0)) & 1
                                                    : static_cast<uint64_t>(src[j] != 0.0f);
              tile_mask[static_cast<size_t>(j)] |= keep << i;
            }
          }
        }
        for (int64_t j = 0; j < width; ++j) {
          const uint64_t real = tile_mask[static_cast<size_t>(j)];
          const int pc = popcount64(real);
          if (pc > n) {
            failed.store(true, std::memory_order_relaxed);
            return;
          }
          const int64_t v = c0 + j;
          store_group(c.values.data() + v * vcols + g * n, c.indices.data() + v * row_bytes,
                      g * n * b, tile.data() + j * m, pad_kept(real, pc, n), real, n, b);
        }
      }
    }
  });
  if (failed.load()) throw_first_overfull(dense, mask, p, NmAxis::kCols, c.cols, groups);
}

// ---------------------------------------------------------------------------------------------
// validation and decompression

// Checks the index row of value row v. On a defect returns false, or throws a message naming it
// when `describe` is set.
bool check_index_row(const CompressedNm& c, int64_t v, bool describe) {
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  const int b = c.pattern.index_bits();
  const int64_t row_bytes = c.index_row_bytes();
  const uint8_t* row = c.indices.data() + v * row_bytes;
  BitReader reader(row, row_bytes);
  const int64_t groups = c.groups_per_row();
  for (int64_t g = 0; g < groups; ++g) {
    int previous = -1;
    for (int k = 0; k < n; ++k) {
      const int index = static_cast<int>(reader.get(b));
      if (index >= m || index <= previous) [[unlikely]] {
        if (!describe) return false;
        if (index >= m) {
          detail::throw_error("nm_validate",
                              detail::concat("value row ", v, ", group ", g, ", slot ", k,
                                             ": index ", index, " >= m (", m, ")"));
        }
        detail::throw_error(
            "nm_validate",
            detail::concat("value row ", v, ", group ", g, ", slot ", k, ": index ", index,
                           " is not greater than the previous index ", previous,
                           " (indices within a group must be strictly increasing)"));
      }
      previous = index;
    }
  }
  // Unused bits at the end of the row.
  const int64_t used_bits = c.value_cols() * b;
  if (used_bits % 8 != 0) {
    const uint8_t last = row[row_bytes - 1];
    if ((last >> (used_bits % 8)) != 0) {
      if (!describe) return false;
      detail::throw_error(
          "nm_validate",
          detail::concat("value row ", v, ": unused bits at the end of index byte ", row_bytes - 1,
                         " are not zero (byte = ", static_cast<int>(last), ")"));
    }
  }
  return true;
}

void decompress_into(const CompressedNm& src, MatrixViewF dst, bool dst_is_zero) {
  const NmPattern p = src.pattern;
  const int n = p.n;
  const int m = p.m;
  const int b = p.index_bits();
  const int64_t groups = src.groups_per_row();
  const int64_t vcols = src.value_cols();
  const int64_t row_bytes = src.index_row_bytes();
  if (src.axis == NmAxis::kRows) {
    for_chunks(src.rows, std::max<int64_t>(1, src.cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* out = dst.row(r);
        if (!dst_is_zero) std::fill(out, out + src.cols, 0.0f);
        const float* vals = src.values.data() + r * vcols;
        BitReader reader(src.indices.data() + r * row_bytes, row_bytes);
        for (int64_t g = 0; g < groups; ++g) {
          float* group = out + g * m;
          for (int k = 0; k < n; ++k) group[reader.get(b)] = vals[k];
          vals += n;
        }
      }
    });
  } else {
    // Tiles of m dense rows x kColBlock dense columns (the value rows of one chunk), so that the
    // writes run along dense rows instead of down columns.
    const int64_t blocks = (src.cols + kColBlock - 1) / kColBlock;
    for_chunks(blocks, std::max<int64_t>(1, src.rows * kColBlock), [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t c0 = blk * kColBlock;
        const int64_t width = std::min(kColBlock, src.cols - c0);
        for (int64_t g = 0; g < groups; ++g) {
          if (!dst_is_zero) {
            for (int i = 0; i < m; ++i) {
              float* out = dst.row(g * m + i) + c0;
              std::fill(out, out + width, 0.0f);
            }
          }
          for (int64_t j = 0; j < width; ++j) {
            const int64_t v = c0 + j;
            const float* vals = src.values.data() + v * vcols + g * n;
            const uint8_t* idx_row = src.indices.data() + v * row_bytes;
            for (int k = 0; k < n; ++k) {
              dst(g * m + read_bits(idx_row, (g * n + k) * b, b), v) = vals[k];
            }
          }
        }
      }
    });
  }
}

}  // namespace

std::string_view axis_name(NmAxis axis) {
  return axis == NmAxis::kRows ? "rows" : "cols";
}

std::optional<NmAxis> axis_from_name(std::string_view name) {
  if (name == "rows") return NmAxis::kRows;
  if (name == "cols") return NmAxis::kCols;
  return std::nullopt;
}

int64_t CompressedNm::value_cols() const {
  return detail::mul_checked(axis_length() / pattern.m, pattern.n, "compressed value columns");
}

int64_t CompressedNm::index_row_bytes() const {
  const int64_t bits = detail::mul_checked(value_cols(), pattern.index_bits(), "index bits");
  return (bits + 7) / 8;
}

int64_t CompressedNm::index_bytes() const {
  return detail::mul_checked(value_rows(), index_row_bytes(), "index bytes");
}

int CompressedNm::index_at(int64_t value_row, int64_t slot) const {
  NMS_DCHECK(value_row >= 0 && value_row < value_rows() && slot >= 0 && slot < value_cols());
  const int b = pattern.index_bits();
  return read_bits(indices.data() + value_row * index_row_bytes(), slot * b, b);
}

int64_t CompressedNm::dense_row_of(int64_t value_row, int64_t slot) const {
  return axis == NmAxis::kRows ? value_row
                               : slot / pattern.n * pattern.m + index_at(value_row, slot);
}

int64_t CompressedNm::dense_col_of(int64_t value_row, int64_t slot) const {
  return axis == NmAxis::kRows ? slot / pattern.n * pattern.m + index_at(value_row, slot)
                               : value_row;
}

void nm_compress_into(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis, CompressedNm& dst) {
  prepare(dst, dense.rows(), dense.cols(), pattern, axis, "nm_compress");
  if (dst.values.empty()) return;
  if (axis == NmAxis::kRows) {
    compress_rows(dense, nullptr, dst);
  } else {
    compress_cols(dense, nullptr, dst);
  }
}

CompressedNm nm_compress(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis) {
  CompressedNm c;
  nm_compress_into(dense, pattern, axis, c);
  return c;
}

void nm_compress_masked_into(ConstMatrixViewF dense, const BitMask& mask, NmPattern pattern,
                             NmAxis axis, CompressedNm& dst) {
  NMS_CHECK(mask.rows() == dense.rows() && mask.cols() == dense.cols(), "mask shape (", mask.rows(),
            " x ", mask.cols(), ") differs from the dense shape (", dense.rows(), " x ",
            dense.cols(), ")");
  prepare(dst, dense.rows(), dense.cols(), pattern, axis, "nm_compress_masked");
  if (dst.values.empty()) return;
  if (axis == NmAxis::kRows) {
    compress_rows(dense, &mask, dst);
  } else {
    compress_cols(dense, &mask, dst);
  }
}

CompressedNm nm_compress_masked(ConstMatrixViewF dense, const BitMask& mask, NmPattern pattern,
                                NmAxis axis) {
  CompressedNm c;
  nm_compress_masked_into(dense, mask, pattern, axis, c);
  return c;
}

BitMask nm_kept_mask(const CompressedNm& src) {
  nm_validate(src);
  BitMask mask(src.rows, src.cols);
  for (int64_t v = 0; v < src.value_rows(); ++v) {
    for (int64_t k = 0; k < src.value_cols(); ++k) {
      mask.set(src.dense_row_of(v, k), src.dense_col_of(v, k));
    }
  }
  return mask;
}

void nm_validate(const CompressedNm& c) {
  check_pattern(c.pattern, "nm_validate");
  check_axis(c.axis, "nm_validate");
  NMS_CHECK(c.rows >= 0 && c.cols >= 0, "negative dense shape (", c.rows, " x ", c.cols, ")");
  NMS_CHECK(c.axis_length() % c.pattern.m == 0, c.axis == NmAxis::kRows ? "cols (" : "rows (",
            c.axis_length(), ") is not a multiple of m (", c.pattern.m, ") along axis ",
            axis_name(c.axis));
  const int64_t expected_values =
      detail::mul_checked(c.value_rows(), c.value_cols(), "compressed values");
  NMS_CHECK(c.values.size() == expected_values, "values hold ", c.values.size(), " floats; shape ",
            c.rows, " x ", c.cols, " with ", c.pattern.to_string(), " along ", axis_name(c.axis),
            " needs ", c.value_rows(), " x ", c.value_cols(), " = ", expected_values);
  NMS_CHECK(c.indices.size() == c.index_bytes(), "indices hold ", c.indices.size(),
            " bytes; the layout needs ", c.value_rows(), " rows x ", c.index_row_bytes(),
            " bytes = ", c.index_bytes());
  if (c.pattern.index_bits() == 0 || c.index_bytes() == 0) return;  // m == 1: nothing to check
  std::atomic<int64_t> first_bad{c.value_rows()};
  for_chunks(c.value_rows(), std::max<int64_t>(1, c.value_cols()), [&](int64_t begin, int64_t end) {
    for (int64_t v = begin; v < end; ++v) {
      if (!check_index_row(c, v, false)) {
        int64_t seen = first_bad.load();
        while (v < seen && !first_bad.compare_exchange_weak(seen, v)) {
        }
        return;
      }
    }
  });
  const int64_t bad = first_bad.load();
  if (bad < c.value_rows()) check_index_row(c, bad, true);
}

void nm_decompress(const CompressedNm& src, MatrixViewF dst) {
  nm_validate(src);
  NMS_CHECK(dst.rows() == src.rows && dst.cols() == src.cols, "destination is ", dst.rows(), " x ",
            dst.cols(), " but the compressed matrix is ", src.rows, " x ", src.cols);
  decompress_into(src, dst, false);
}

Matrix nm_decompress(const CompressedNm& src) {
  nm_validate(src);
  Matrix dst(src.rows, src.cols);
  decompress_into(src, dst.view(), true);
  return dst;
}

}  // namespace nms
