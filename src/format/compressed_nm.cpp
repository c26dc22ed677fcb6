#include "nmsparse/format/compressed_nm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

// -0.0 -> +0.0, everything else (NaN payloads included) unchanged. Compiles to compare + blend.
inline float canonical_zero(float v) {
  return v == 0.0f ? 0.0f : v;
}

// Mask with the lowest `count` bits set (count in [0, 64]).
inline uint64_t low_bits(int count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

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

// Sequential LSB-first bit writer for one index row. `put` takes at most 32 bits.
class BitWriter {
 public:
  explicit BitWriter(uint8_t* dst) : dst_(dst) {}
  void put(uint32_t bits, int count) {
    acc_ |= uint64_t{bits} << fill_;
    fill_ += count;
    while (fill_ >= 8) {
      *dst_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void finish() {
    if (fill_ > 0) *dst_ = static_cast<uint8_t>(acc_);
  }

 private:
  uint8_t* dst_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// Sequential LSB-first bit reader for one index row of `bytes` bytes; never reads past it.
class BitReader {
 public:
  BitReader(const uint8_t* src, int64_t bytes) : src_(src), end_(src + bytes) {}
  uint32_t get(int count) {
    while (fill_ < count) {
      acc_ |= uint64_t{src_ < end_ ? *src_ : uint8_t{0}} << fill_;
      ++src_;
      fill_ += 8;
    }
    const auto v = static_cast<uint32_t>(acc_ & low_bits(count));
    acc_ >>= count;
    fill_ -= count;
    return v;
  }
  // Bits still buffered (the tail of the last byte read).
  uint64_t pending() const { return acc_; }

 private:
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

// An empty CompressedNm of the right sizes for `dense`, after the shared argument checks.
CompressedNm make_compressed(int64_t rows, int64_t cols, NmPattern pattern, NmAxis axis,
                             const char* func) {
  check_pattern(pattern, func);
  check_axis(axis, func);
  CompressedNm c;
  c.rows = rows;
  c.cols = cols;
  c.pattern = pattern;
  c.axis = axis;
  if (c.axis_length() % pattern.m != 0) {
    detail::throw_error(
        func, detail::concat(axis == NmAxis::kRows ? "cols (" : "rows (", c.axis_length(),
                             ") is not a multiple of m (", pattern.m, ") for ", pattern.to_string(),
                             " along axis ", axis_name(axis)));
  }
  c.values.resize(detail::mul_checked(c.value_rows(), c.value_cols(), "compressed values"));
  c.indices.resize(c.index_bytes());
  return c;
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

// Per-pattern table for m <= 8, indexed by the group's nonzero mask.
struct SmallLut {
  std::array<std::array<uint8_t, 8>, 256> pos{};  // kept positions after padding, ascending
  std::array<uint32_t, 256> bits{};               // the n packed indices of the group
  std::array<uint8_t, 256> ok{};                  // popcount(mask) <= n
};

SmallLut make_small_lut(NmPattern p) {
  SmallLut lut;
  const int b = p.index_bits();
  for (uint32_t mask = 0; mask < (1u << p.m); ++mask) {
    const int pc = std::popcount(mask);
    lut.ok[mask] = pc <= p.n ? 1 : 0;
    if (pc > p.n) continue;
    uint64_t kept = pad_kept(mask, pc, p.n);
    for (int k = 0; k < p.n; ++k) {
      const int i = std::countr_zero(kept);
      kept &= kept - 1;
      lut.pos[mask][k] = static_cast<uint8_t>(i);
      lut.bits[mask] |= static_cast<uint32_t>(i) << (k * b);
    }
  }
  return lut;
}

// Compresses one dense row with m == M (2, 4 or 8) and n == N (0: runtime n). Returns false at
// the first group over the limit (outputs are then partial and discarded by the caller).
template <int M, int N>
bool compress_row_small(const float* src, int64_t groups, int n_runtime, int b, const SmallLut& lut,
                        float* vals, uint8_t* idx) {
  const int n = N != 0 ? N : n_runtime;
  const int group_bits = n * b;
  BitWriter writer(idx);
  for (int64_t g = 0; g < groups; ++g) {
    const float* p = src + g * M;
    uint32_t mask = 0;
    for (int i = 0; i < M; ++i) mask |= static_cast<uint32_t>(p[i] != 0.0f) << i;  // NaN != 0
    if (lut.ok[mask] == 0) [[unlikely]] {
      return false;
    }
    const uint8_t* pos = lut.pos[mask].data();
    for (int k = 0; k < n; ++k) vals[k] = canonical_zero(p[pos[k]]);
    vals += n;
    writer.put(lut.bits[mask], group_bits);
  }
  writer.finish();
  return true;
}

// Any m in [1, 64]. Same contract as compress_row_small.
bool compress_row_generic(const float* src, int64_t groups, int n, int m, int b, float* vals,
                          uint8_t* idx) {
  BitWriter writer(idx);
  for (int64_t g = 0; g < groups; ++g) {
    const float* p = src + g * m;
    uint64_t mask = 0;
    for (int i = 0; i < m; ++i) mask |= static_cast<uint64_t>(p[i] != 0.0f) << i;
    const int pc = std::popcount(mask);
    if (pc > n) [[unlikely]] {
      return false;
    }
    uint64_t kept = pad_kept(mask, pc, n);
    for (int k = 0; k < n; ++k) {
      const int i = std::countr_zero(kept);
      kept &= kept - 1;
      vals[k] = canonical_zero(p[i]);
      writer.put(static_cast<uint32_t>(i), b);
    }
    vals += n;
  }
  writer.finish();
  return true;
}

// Nonzeros of group g of value row v (the group's dense elements along the axis).
int group_nonzeros(ConstMatrixViewF dense, NmAxis axis, int m, int64_t v, int64_t g) {
  int count = 0;
  for (int i = 0; i < m; ++i) {
    const float x = axis == NmAxis::kRows ? dense(v, g * m + i) : dense(g * m + i, v);
    count += x != 0.0f ? 1 : 0;
  }
  return count;
}

// Throws the message for the first over-full group in value-row order. Only called after a
// failure was detected, so it may be slow.
[[noreturn]] void throw_first_overfull(ConstMatrixViewF dense, NmPattern p, NmAxis axis,
                                       int64_t value_rows, int64_t groups) {
  for (int64_t v = 0; v < value_rows; ++v) {
    for (int64_t g = 0; g < groups; ++g) {
      const int count = group_nonzeros(dense, axis, p.m, v, g);
      if (count > p.n) {
        detail::throw_error(
            "nm_compress",
            detail::concat(axis == NmAxis::kRows ? "row " : "column ", v, ", group ", g,
                           axis == NmAxis::kRows ? " (cols " : " (rows ", g * p.m, "..",
                           g * p.m + p.m - 1, ") has ", count, " nonzeros; pattern ", p.to_string(),
                           " allows at most ", p.n));
      }
    }
  }
  NMS_ASSERT(false, "an over-full group was reported but none was found");
}

void compress_rows(ConstMatrixViewF dense, CompressedNm& c) {
  const NmPattern p = c.pattern;
  const int b = p.index_bits();
  const int64_t groups = c.groups_per_row();
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
      bool ok = false;
      switch (p.m) {
        case 2:
          ok = p.n == 1 ? compress_row_small<2, 1>(src, groups, 1, b, lut, vals, idx)
                        : compress_row_small<2, 2>(src, groups, 2, b, lut, vals, idx);
          break;
        case 4:
          ok = p.n == 2 ? compress_row_small<4, 2>(src, groups, 2, b, lut, vals, idx)
                        : compress_row_small<4, 0>(src, groups, p.n, b, lut, vals, idx);
          break;
        case 8:
          ok = compress_row_small<8, 0>(src, groups, p.n, b, lut, vals, idx);
          break;
        default:
          ok = compress_row_generic(src, groups, p.n, p.m, b, vals, idx);
          break;
      }
      if (!ok) {
        failed.store(true, std::memory_order_relaxed);
        return;
      }
    }
  });
  if (failed.load()) throw_first_overfull(dense, p, NmAxis::kRows, c.rows, groups);
}

// ---------------------------------------------------------------------------------------------
// axis kCols and masked compression: one group at a time through a small transposed tile.

constexpr int64_t kColBlock = 32;  // dense columns per tile

// Stores one group (m contiguous floats in `g`, kept positions `kept` with exactly n bits set,
// `mask_bits` the positions that are really kept; the rest of `kept` is padding and stores +0.0)
// at group `group` of value row `v`.
inline void store_group(CompressedNm& c, int64_t v, int64_t group, const float* g, uint64_t kept,
                        uint64_t real, int b) {
  const int n = c.pattern.n;
  float* vals = c.values.data() + v * c.value_cols() + group * n;
  uint8_t* idx_row = c.indices.data() + v * c.index_row_bytes();
  int64_t bit = group * n * b;
  for (int k = 0; k < n; ++k) {
    const int i = std::countr_zero(kept);
    kept &= kept - 1;
    vals[k] = ((real >> i) & 1) != 0 ? canonical_zero(g[i]) : 0.0f;
    or_bits(idx_row, bit, static_cast<uint32_t>(i), b);
    bit += b;
  }
}

// Shared driver for kCols (any source) and masked kRows/kCols. `mask` may be null (keep the
// nonzeros). Returns normally or throws the first over-full group in value-row order.
void compress_groups(ConstMatrixViewF dense, const BitMask* mask, CompressedNm& c) {
  const NmPattern p = c.pattern;
  const int n = p.n;
  const int m = p.m;
  const int b = p.index_bits();
  const int64_t groups = c.groups_per_row();
  std::atomic<bool> failed{false};
  if (c.axis == NmAxis::kRows) {
    // Masked kRows: groups are contiguous in dense and in the mask rows.
    for_chunks(c.rows, std::max<int64_t>(1, c.cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* src = dense.row(r);
        const uint64_t* words = mask->row_words(r);
        for (int64_t g = 0; g < groups; ++g) {
          const uint64_t real = extract_bits(words, g * m, m);
          const int pc = std::popcount(real);
          if (pc > n) {
            failed.store(true, std::memory_order_relaxed);
            return;
          }
          store_group(c, r, g, src + g * m, pad_kept(real, pc, n), real, b);
        }
      }
    });
  } else {
    // kCols: tiles of m dense rows x kColBlock dense columns, transposed into `tile` so that each
    // value row's group is contiguous. Each chunk owns whole value rows (dense columns).
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
            for (int64_t j = 0; j < width; ++j) {
              tile[j * m + i] = src[j];
              const bool keep = mask != nullptr ? mask->get(r, c0 + j) : src[j] != 0.0f;
              tile_mask[j] |= static_cast<uint64_t>(keep) << i;
            }
          }
          for (int64_t j = 0; j < width; ++j) {
            const uint64_t real = tile_mask[j];
            const int pc = std::popcount(real);
            if (pc > n) {
              failed.store(true, std::memory_order_relaxed);
              return;
            }
            store_group(c, c0 + j, g, tile.data() + j * m, pad_kept(real, pc, n), real, b);
          }
        }
      }
    });
  }
  if (!failed.load()) return;
  if (mask == nullptr) throw_first_overfull(dense, p, c.axis, c.value_rows(), groups);
  for (int64_t v = 0; v < c.value_rows(); ++v) {
    for (int64_t g = 0; g < groups; ++g) {
      int count = 0;
      for (int i = 0; i < m; ++i) {
        count += c.axis == NmAxis::kRows ? mask->get(v, g * m + i) : mask->get(g * m + i, v);
      }
      if (count > n) {
        detail::throw_error(
            "nm_compress_masked",
            detail::concat("mask ", c.axis == NmAxis::kRows ? "row " : "column ", v, ", group ", g,
                           c.axis == NmAxis::kRows ? " (cols " : " (rows ", g * m, "..",
                           g * m + m - 1, ") has ", count, " set bits; pattern ", p.to_string(),
                           " allows at most ", n));
      }
    }
  }
  NMS_ASSERT(false, "an over-full mask group was reported but none was found");
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
    if (!dst_is_zero) {
      for (int64_t r = 0; r < src.rows; ++r) std::fill(dst.row(r), dst.row(r) + src.cols, 0.0f);
    }
    for_chunks(src.cols, std::max<int64_t>(1, src.rows), [&](int64_t begin, int64_t end) {
      for (int64_t col = begin; col < end; ++col) {
        const float* vals = src.values.data() + col * vcols;
        BitReader reader(src.indices.data() + col * row_bytes, row_bytes);
        for (int64_t g = 0; g < groups; ++g) {
          for (int k = 0; k < n; ++k) dst(g * m + reader.get(b), col) = vals[k];
          vals += n;
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
  if (b == 0) return 0;
  const int64_t row_bytes = index_row_bytes();
  const uint8_t* row = indices.data() + value_row * row_bytes;
  const int64_t bit = slot * b;
  const int64_t byte = bit >> 3;
  uint32_t v = row[byte];
  if (byte + 1 < row_bytes) v |= static_cast<uint32_t>(row[byte + 1]) << 8;
  return static_cast<int>((v >> (bit & 7)) & low_bits(b));
}

int64_t CompressedNm::dense_row_of(int64_t value_row, int64_t slot) const {
  return axis == NmAxis::kRows ? value_row
                               : slot / pattern.n * pattern.m + index_at(value_row, slot);
}

int64_t CompressedNm::dense_col_of(int64_t value_row, int64_t slot) const {
  return axis == NmAxis::kRows ? slot / pattern.n * pattern.m + index_at(value_row, slot)
                               : value_row;
}

CompressedNm nm_compress(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis) {
  CompressedNm c = make_compressed(dense.rows(), dense.cols(), pattern, axis, "nm_compress");
  if (c.values.empty()) return c;
  if (axis == NmAxis::kRows) {
    compress_rows(dense, c);
  } else {
    compress_groups(dense, nullptr, c);
  }
  return c;
}

CompressedNm nm_compress_masked(ConstMatrixViewF dense, const BitMask& mask, NmPattern pattern,
                                NmAxis axis) {
  NMS_CHECK(mask.rows() == dense.rows() && mask.cols() == dense.cols(), "mask shape (", mask.rows(),
            " x ", mask.cols(), ") differs from the dense shape (", dense.rows(), " x ",
            dense.cols(), ")");
  CompressedNm c = make_compressed(dense.rows(), dense.cols(), pattern, axis, "nm_compress_masked");
  if (c.values.empty()) return c;
  compress_groups(dense, &mask, c);
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
