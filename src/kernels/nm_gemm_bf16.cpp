// nm_gemm_bf16 (nmsparse/kernels/nm_gemm_bf16.h): packing, validation, the scalar path and the
// threaded driver of the AVX-512 BF16 kernel (nm_gemm_bf16_avx512.cpp).
#include "nmsparse/kernels/nm_gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <functional>
#include <string>
#include <type_traits>

#include "core/bits.h"
#include "core/parallel.h"
#include "core/views_overlap.h"
#include "kernels/nm_gemm_bf16_layout.h"
#include "kernels/nm_gemm_bf16_scalar.h"
#include "kernels/nm_gemm_bias.h"
#include "kernels/row_order.h"
#include "kernels/stage_transposed.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/kernels/transpose.h"

namespace nms {
namespace {

using detail::kBf16Chunk;
using detail::kBf16Rows;
using detail::NmGemmBf16Layout;

// Tokens per work item: 256, the fp32 permute driver's block (nm_gemm_lanes.cpp).
constexpr int64_t kTokenBlock = 256;

template <class T>
void run_scalar(MatrixView<const T> x, const NmGemmBf16Operand& a, MatrixViewF y,
                const float* bias) {
  const NmGemmBf16Layout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  detail::parallel_for(x.rows(), [&](int64_t t) {
    for (int64_t r = 0; r < a.rows; ++r)
      y(t, r) = detail::bf16_row_chain(x.row(t), a, lay, r, 0.0f);
    detail::add_bias(y.data(), y.ld(), t, t + 1, 0, a.rows, bias);
  });
}

// Row block b of nm_gemm_bf16_pack_masked_into's operand, group by group (index null: the values
// only); false when a group keeps more than n.
bool pack_masked_block_scalar(ConstMatrixViewF a, const BitMask& mask, NmPattern p,
                              const NmGemmBf16Layout& lay, uint16_t* values, uint16_t* index,
                              int64_t b) {
  const uint32_t group_bits = p.m == 32 ? ~0u : (1u << p.m) - 1u;
  bool ok = true;
  for (int64_t l = 0; l < kBf16Rows; ++l) {
    const int64_t r = b * kBf16Rows + l;
    const bool real = r < a.rows();
    for (int64_t c = 0; c < lay.chunks; ++c) {
      uint16_t* v = values + lay.offset(b, c, 0);
      uint16_t* x = index != nullptr ? index + lay.offset(b, c, 0) : nullptr;
      const int64_t cols = std::min(kBf16Chunk, a.cols() - c * kBf16Chunk);
      // The chunk's 32 mask bits: half of a 64-bit word (chunks start at multiples of 32).
      const uint32_t bits =
          real ? static_cast<uint32_t>(mask.row_words(r)[c / 2] >> (32 * (c % 2))) : 0u;
      int64_t s = 0;
      for (int64_t g0 = 0; g0 < cols && real; g0 += p.m) {
        const uint32_t kept = (bits >> g0) & group_bits;
        if (detail::popcount64(kept) > p.n) ok = false;
        uint32_t slots = detail::canonical_slots(kept, group_bits, p.n);
        for (int k = 0; k < p.n; ++k, ++s) {
          const int64_t at = NmGemmBf16Layout::word(s, l);
          const int col = std::countr_zero(slots);
          slots &= slots - 1;
          const float value = (kept >> col) & 1u ? a(r, c * kBf16Chunk + g0 + col) : 0.0f;
          v[at] =
              value == 0.0f ? uint16_t{0} : detail::round_operand_bf16(value);  // -0 stored as +0
          if (x != nullptr) x[at] = static_cast<uint16_t>(g0 + col);
        }
      }
      // Rows past R, an odd slot count's partner, pairs of a partial chunk past its slots.
      for (; s < 2 * lay.pairs_per_chunk; ++s) {
        v[NmGemmBf16Layout::word(s, l)] = 0;
        if (x != nullptr) x[NmGemmBf16Layout::word(s, l)] = 0;
      }
    }
  }
  return ok;
}

// Names the first group of `mask` (row-major order) that keeps more than n.
void throw_first_overfull_group(const BitMask& mask, NmPattern p) {
  for (int64_t r = 0; r < mask.rows(); ++r) {
    for (int64_t c0 = 0; c0 < mask.cols(); c0 += p.m) {
      const int64_t count = mask.count_row_range(r, c0, p.m);
      NMS_CHECK(count <= p.n, "row ", r, " group ", c0 / p.m, " (columns ", c0, "..", c0 + p.m - 1,
                ") keeps ", count, " > n (", p.n, ")");
    }
  }
}

}  // namespace

bool nm_gemm_bf16_supports(NmPattern pattern) {
  return pattern.n >= 1 && pattern.n <= pattern.m && pattern.m <= kMaxGroupSize &&
         kBf16Chunk % pattern.m == 0;
}

void detail::check_bf16_pattern(NmPattern p, const char* what) {
  NMS_CHECK(nm_gemm_bf16_supports(p), what, ": pattern ", p.to_string(),
            " is not supported (m must divide 32: 1:2, 2:4, 4:8, 8:16, 16:32, ...)");
}

bool nm_gemm_bf16_kernel_active() {
#if defined(NMS_HAVE_AVX512_KERNELS)
  static const bool cpu_has_bf16 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return cpu_has_bf16 && isa_active() == Isa::kAvx512;
#else
  return false;
#endif
}

void nm_gemm_bf16_pack_into(const CompressedNm& compressed, NmGemmBf16Operand& dst) {
  const NmPattern p = compressed.pattern;
  detail::check_bf16_pattern(p, "nm_gemm_bf16");
  nm_validate(compressed);  // buffer sizes, indices in range and increasing
  detail::nm_gemm_bf16_pack_compressed(compressed, dst);
}

namespace {

// Value row r (row r of A) of a compression into the layout, slot by slot (the index stream read
// b bits at a time, LSB first).
void pack_compressed_row(const CompressedNm& c, const NmGemmBf16Layout& lay, int64_t r,
                         uint16_t* values, uint16_t* index) {
  const NmPattern p = c.pattern;
  const int64_t slots = c.value_cols();
  const int bits = p.index_bits();
  const uint64_t index_mask = (uint64_t{1} << bits) - 1u;
  const float* v = c.values.data() + r * slots;
  const uint8_t* next = c.indices.data() + r * c.index_row_bytes();
  uint64_t stream = 0;
  int have = 0;
  const int64_t row_words = r % kBf16Rows / 16 * 32 + r % 16 * 2;
  for (int64_t g = 0; g < slots; ++g) {
    while (have < bits) {
      stream |= uint64_t{*next++} << have;
      have += 8;
    }
    const auto in_group = static_cast<int64_t>(stream & index_mask);
    stream >>= bits;
    have -= bits;
    const int64_t s = g % lay.slots_per_chunk;
    const int64_t at =
        lay.offset(r / kBf16Rows, g / lay.slots_per_chunk, s / 2) + row_words + s % 2;
    values[at] = detail::round_operand_bf16(v[g]);
    index[at] = static_cast<uint16_t>((s / p.n * p.m + in_group) % kBf16Chunk);
  }
}

}  // namespace

void detail::nm_gemm_bf16_for_items(
    int64_t tokens, int64_t blocks,
    const std::function<void(int64_t, int64_t, int64_t, int64_t)>& item) {
  const int64_t token_blocks = (tokens + kTokenBlock - 1) / kTokenBlock;
  // Row parts when the token blocks alone would leave threads idle (at least 2 items per thread;
  // each item owns its block of Y, so results do not depend on the split).
  const int64_t row_parts =
      std::clamp<int64_t>((2 * max_threads() + token_blocks - 1) / token_blocks, 1, blocks);
  detail::parallel_for(token_blocks * row_parts, [&](int64_t i) {
    const int64_t t0 = i / row_parts * kTokenBlock;
    item(t0, std::min(tokens, t0 + kTokenBlock), i % row_parts * blocks / row_parts,
         (i % row_parts + 1) * blocks / row_parts);
  });
}

NmGemmBf16Layout detail::nm_gemm_bf16_prepare(int64_t rows, int64_t depth, NmPattern p,
                                              NmGemmBf16Operand& dst) {
  const NmGemmBf16Layout lay(rows, depth, p.n, p.m);
  // Zero-filled only when the layout changes (a training layer packs dYᵀ of one shape every
  // step: no allocation and no page faults after the first).
  if (dst.rows != rows || dst.depth != depth || dst.pattern != p ||
      dst.values.size() != lay.total() || dst.index.size() != lay.total()) {
    dst.values.resize(lay.total());
    dst.index.resize(lay.total());
  }
  dst.index_mask = BitMask();  // not a masked pack's
  dst.rows = rows;
  dst.depth = depth;
  dst.pattern = p;
  return lay;
}

void detail::nm_gemm_bf16_pack_compressed(const CompressedNm& compressed, NmGemmBf16Operand& dst) {
  const NmPattern p = compressed.pattern;
  const int64_t rows = compressed.value_rows();
  const int64_t depth = compressed.axis_length();
  // Every real slot's two words are written below; the padding words only by the zero-fill.
  const NmGemmBf16Layout lay = nm_gemm_bf16_prepare(rows, depth, p, dst);
  const bool avx512 = p == NmPattern{2, 4} && nm_gemm_bf16_kernel_active();
  const NmGemmBf16CompressedArgs args{compressed.values.data(),
                                      compressed.value_cols(),
                                      compressed.indices.data(),
                                      compressed.index_row_bytes(),
                                      rows,
                                      depth,
                                      dst.values.data(),
                                      dst.index.data()};
  detail::parallel_for(lay.blocks, [&](int64_t b) {
    if (avx512) {
      detail::nm_gemm_bf16_pack_compressed24_avx512(args, b);
      return;
    }
    for (int64_t r = b * kBf16Rows; r < std::min(rows, (b + 1) * kBf16Rows); ++r) {
      pack_compressed_row(compressed, lay, r, dst.values.data(), dst.index.data());
    }
  });
}

namespace {

// The checks of the masked packers (pattern, mask shape, m dividing the depth) and dst labelled
// and sized for a [rows, depth] operand whose every word the packer then writes. *index is where
// the packer writes the index words: null when dst holds them already, packed from an equal mask
// (dst.index_mask; they depend on the mask alone), else dst.index after dst.index_mask = mask.
NmGemmBf16Layout prepare_masked(int64_t rows, int64_t depth, const BitMask& mask, NmPattern p,
                                const char* what, NmGemmBf16Operand& dst, uint16_t** index) {
  detail::check_bf16_pattern(p, "nm_gemm_bf16");
  NMS_CHECK(mask.rows() == rows && mask.cols() == depth, "mask shape (", mask.rows(), " x ",
            mask.cols(), ") differs from the ", what, " (", rows, " x ", depth, ")");
  NMS_CHECK(depth % p.m == 0, "m (", p.m, ") does not divide the grouped axis (", depth, ")");
  const NmGemmBf16Layout lay(rows, depth, p.n, p.m);
  const bool current = dst.rows == rows && dst.depth == depth && dst.pattern == p &&
                       dst.values.size() == lay.total() && dst.index.size() == lay.total() &&
                       dst.index_mask == mask;
  dst.rows = rows;
  dst.depth = depth;
  dst.pattern = p;
  if (dst.values.size() != lay.total()) {
    dst.values.resize_for_overwrite(lay.total());
    dst.index.resize_for_overwrite(lay.total());
  }
  if (!current) dst.index_mask = mask;  // copied into its storage; forgotten on a failure
  *index = current ? nullptr : dst.index.data();
  return lay;
}

// A failed masked pack: no index words to reuse, and the first over-full group named.
void fail_masked_pack(const BitMask& mask, NmPattern p, NmGemmBf16Operand& dst) {
  dst.index_mask = BitMask();
  throw_first_overfull_group(mask, p);
}

}  // namespace

void nm_gemm_bf16_pack_masked_into(ConstMatrixViewF a, const BitMask& mask, NmPattern p,
                                   NmGemmBf16Operand& dst) {
  uint16_t* index = nullptr;
  const NmGemmBf16Layout lay = prepare_masked(a.rows(), a.cols(), mask, p, "matrix", dst, &index);
  const detail::NmGemmBf16PackArgs args{
      a.data(),
      a.ld(),
      a.rows(),
      a.cols(),
      mask.row_words(0),
      mask.words_per_row(),
      p.n,
      dst.values.data(),
      index,  // null: the values only
  };
  const bool avx512 = p.m == 4 && nm_gemm_bf16_kernel_active();
  std::atomic<bool> overfull{false};
  detail::parallel_for(lay.blocks, [&](int64_t b) {
    const bool ok = avx512 ? detail::nm_gemm_bf16_pack_m4_avx512(args, b)
                           : pack_masked_block_scalar(a, mask, p, lay, dst.values.data(), index, b);
    if (!ok) overfull.store(true, std::memory_order_relaxed);
  });
  if (overfull.load()) fail_masked_pack(mask, p, dst);
}

void nm_gemm_bf16_pack_masked_transposed_into(ConstMatrixViewF w, std::span<const int64_t> order,
                                              const BitMask& mask_t, NmPattern p,
                                              NmGemmBf16Operand& dst) {
  detail::check_row_order(order, w.rows(), "nm_gemm_bf16_pack_masked_transposed_into");
  const int64_t depth = order.empty() ? w.rows() : static_cast<int64_t>(order.size());
  if (p.m == 4 && nm_gemm_bf16_kernel_active()) {
    // Straight from W: per work item one chunk of 32 rows of W (in `order`) by the columns of 16
    // row blocks, transposed through registers into a 64 KB stage (32 rows of 2 KB read side by
    // side) and packed from it. 4096 x 4096, 2:4, one thread, Zen 4: 13.0 ms against 17.8 for a
    // transposed copy and the pack from it (bench_nm_gemm_bf16: pack_t_bf16_ms,
    // pack_t_bf16_copy_ms); stages of 8 and 32 row blocks measured 0.74x and 0.78x of the copy
    // route, 16 blocks 0.73x. (A 32-column strip of W by all its rows, staged through registers
    // instead, took 21 ms: each strip walks every row, a 4 KB page apiece.)
    uint16_t* index = nullptr;
    const NmGemmBf16Layout lay =
        prepare_masked(w.cols(), depth, mask_t, p, "transposed matrix", dst, &index);
    const detail::NmGemmBf16PackArgs args{
        nullptr,
        0,
        w.cols(),
        depth,
        mask_t.row_words(0),
        mask_t.words_per_row(),
        p.n,
        dst.values.data(),
        index,  // null: the values only
    };
    constexpr int64_t kSegmentBlocks = 16;  // 512 rows of A x 32 floats: a 64 KB stage
    const int64_t segments = (lay.blocks + kSegmentBlocks - 1) / kSegmentBlocks;
    const Isa isa = isa_active();
    std::atomic<bool> overfull{false};
    detail::parallel_for(lay.chunks * segments, [&](int64_t item) {
      alignas(64) float stage[kSegmentBlocks * kBf16Rows * kBf16Chunk];
      const int64_t c = item / segments;
      const int64_t b0 = item % segments * kSegmentBlocks;
      const int64_t b1 = std::min(lay.blocks, b0 + kSegmentBlocks);
      const int64_t j0 = b0 * kBf16Rows;
      const int64_t j1 = std::min(w.cols(), b1 * kBf16Rows);
      const int64_t width = std::min(kBf16Chunk, depth - c * kBf16Chunk);
      detail::stage_transposed(w, order, j0, j1, c * kBf16Chunk, width, kBf16Chunk, isa, stage);
      for (int64_t b = b0; b < b1; ++b) {
        if (!detail::nm_gemm_bf16_pack_m4_staged_avx512(args, b, c, stage, j0)) {
          overfull.store(true, std::memory_order_relaxed);
          return;
        }
      }
    });
    if (overfull.load()) fail_masked_pack(mask_t, p, dst);
    return;
  }
  // Other patterns through a transposed copy kept per calling thread, then the masked pack.
  thread_local AlignedBuffer<float> copy;
  if (copy.size() < w.cols() * depth) copy.resize_for_overwrite(w.cols() * depth);
  const MatrixViewF wt(copy.data(), w.cols(), depth);
  transpose_into(w, wt, order);
  nm_gemm_bf16_pack_masked_into(wt, mask_t, p, dst);
}

NmGemmBf16Operand nm_gemm_bf16_pack(const CompressedNm& compressed) {
  NmGemmBf16Operand a;
  nm_gemm_bf16_pack_into(compressed, a);
  return a;
}

namespace {

template <class T>
std::string check(MatrixView<const T> x, const NmGemmBf16Operand& a, MatrixViewF y) {
  if (!nm_gemm_bf16_supports(a.pattern)) {
    return "operand pattern " + a.pattern.to_string() + " is not supported";
  }
  const NmGemmBf16Layout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  if (a.rows < 0 || a.depth < 0 || a.depth % a.pattern.m != 0 || a.values.size() != lay.total() ||
      a.index.size() != lay.total()) {
    return "the operand is not packed (use nm_gemm_bf16_pack)";
  }
  if (x.cols() != a.depth) {
    return "x has " + std::to_string(x.cols()) + " columns, the operand's depth is " +
           std::to_string(a.depth);
  }
  if (y.rows() != x.rows() || y.cols() != a.rows) {
    return "y is " + std::to_string(y.rows()) + " x " + std::to_string(y.cols()) + ", expected " +
           std::to_string(x.rows()) + " x " + std::to_string(a.rows);
  }
  if (detail::views_overlap(x, y)) return "x and y overlap";
  return {};
}

template <class T>
void run(MatrixView<const T> x, const NmGemmBf16Operand& a, MatrixViewF y, const float* bias) {
  const std::string error = check(x, a, y);
  NMS_CHECK(error.empty(), error);
  if (bias != nullptr && a.rows > 0 && y.rows() > 0) {
    NMS_CHECK(!detail::views_overlap(ConstMatrixViewF(bias, 1, a.rows, a.rows), y),
              "the bias lies inside y");
  }
  if (y.size() == 0) return;
  if (a.depth == 0) {
    for (int64_t t = 0; t < y.rows(); ++t) std::fill(y.row(t), y.row(t) + y.cols(), 0.0f);
    detail::add_bias(y.data(), y.ld(), 0, y.rows(), 0, a.rows, bias);
    return;
  }
  if (!nm_gemm_bf16_kernel_active()) {
    run_scalar(x, a, y, bias);
    return;
  }
  detail::NmGemmBf16Args args{};
  args.values = a.values.data();
  args.index = a.index.data();
  args.rows = a.rows;
  args.depth = a.depth;
  args.n = a.pattern.n;
  args.m = a.pattern.m;
  const NmGemmBf16Layout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  detail::nm_gemm_bf16_for_items(
      x.rows(), lay.blocks, [&](int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
        detail::NmGemmBf16Args item = args;  // tokens [t0, t1) as rows [0, t1 - t0)
        item.y = y.row(t0);
        item.ldy = y.ld();
        if constexpr (std::is_same_v<T, float>) {
          // The item's rows of X rounded once into a per-thread buffer (256 x K bf16, in L2 for K
          // up to 2048), then read by every row block: rounding inside the kernel instead
          // re-rounded each chunk per row block, 4-10 % of the kernel (one thread, Zen 4,
          // bench_nm_gemm_bf16).
          thread_local AlignedBuffer<uint16_t> rounded;
          if (rounded.size() < kTokenBlock * a.depth)
            rounded.resize_for_overwrite(kTokenBlock * a.depth);
          detail::round_rows_to_bf16_avx512(x.row(t0), x.ld(), t1 - t0, a.depth, rounded.data());
          item.x = rounded.data();
          item.ldx = a.depth;
        } else {
          item.x = x.row(t0);
          item.ldx = x.ld();
        }
        detail::nm_gemm_bf16_avx512(item, 0, t1 - t0, b0, b1);
        detail::add_bias(y.data(), y.ld(), t0, t1, b0 * kBf16Rows, std::min(a.rows, b1 * kBf16Rows),
                         bias);
      });
}

}  // namespace

std::string nm_gemm_bf16_check(MatrixView<const uint16_t> x, const NmGemmBf16Operand& a,
                               MatrixViewF y) {
  return check(x, a, y);
}
std::string nm_gemm_bf16_check(ConstMatrixViewF x, const NmGemmBf16Operand& a, MatrixViewF y) {
  return check(x, a, y);
}

void nm_gemm_bf16(MatrixView<const uint16_t> x, const NmGemmBf16Operand& a, MatrixViewF y,
                  const float* bias) {
  run(x, a, y, bias);
}
void nm_gemm_bf16(ConstMatrixViewF x, const NmGemmBf16Operand& a, MatrixViewF y,
                  const float* bias) {
  run(x, a, y, bias);
}

}  // namespace nms
