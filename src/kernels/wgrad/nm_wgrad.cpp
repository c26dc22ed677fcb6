// nm_wgrad driver: validation, work items, the loop nest, packing of the X panels, and ISA
// dispatch of the dYᵀ decoder and the micro-kernel (see nm_wgrad.h and wgrad_kernels.h).
#include "nmsparse/kernels/nm_wgrad.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/parallel.h"
#include "core/views_overlap.h"
#include "grad/prune_lanes.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/wgrad/wgrad_kernels.h"
#include "kernels/wgrad/wgrad_lanes.h"
#include "kernels/wgrad/wgrad_validate.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

using detail::kWgradMaxBlockSlots;
using detail::kWgradPanel;
using detail::kWgradRowTile;
using detail::kWgradTileWords;

// Tokens per K-block (rounded down to a multiple of m): a [64][128] float X panel is 32 KiB and
// stays in the 48 KiB L1 while a chunk of row tiles streams its slots past it. (Measured on the
// 2-core Xeon, 2:4 S1, one thread: 3 x 128 tiles with 64-token blocks 1.24-1.26x over OpenBLAS,
// 6 x 64 with 128 1.19-1.21x, 4 x 96 with 80 1.22x, 2 x 192 with 48 1.14x; 6 x 64 with 64 or 256
// tokens slower than with 128.)
constexpr int64_t kKBlockTarget = 64;
static_assert(kKBlockTarget <= kWgradMaxBlockSlots);
// Row tiles per chunk: the chunk's decoded slots for one K-block (32 tiles · 3 rows · 32 slots ·
// 8 B = 24 KiB at 2:4) stay in L1/L2 while the item's panels go past them. 16-256 tiles (of 6
// rows) measured within noise, except 256 (8 % slower).
constexpr int64_t kChunkTiles = 32;

int64_t k_block_for(NmPattern p) {
  return std::max<int64_t>(1, kKBlockTarget / p.m) * p.m;
}

// Packs X[t0 .. t0 + kc, col0 .. col0 + panels · 64) into `dst` as `panels` consecutive
// [k_block][64] panels (columns past `in` zero).
void pack_x_block(ConstMatrixViewF x, int64_t t0, int64_t kc, int64_t k_block, int64_t col0,
                  int64_t panels, float* dst) {
  const int64_t in = x.cols();
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t c = col0 + p * kWgradPanel;
    const int64_t width = std::min<int64_t>(kWgradPanel, in - c);
    float* panel = dst + p * k_block * kWgradPanel;
    for (int64_t t = 0; t < kc; ++t) {
      float* row = panel + t * kWgradPanel;
      std::memcpy(row, x.row(t0 + t) + c, static_cast<size_t>(width) * sizeof(float));
      if (width < kWgradPanel) {
        std::memset(row + width, 0, static_cast<size_t>(kWgradPanel - width) * sizeof(float));
      }
    }
  }
}

// The largest block of dW [out, in] that one work item owns when the row tiles are split into
// row_chunks ranges and the column panels into col_chunks (as the driver splits them).
int64_t largest_item(int64_t out, int64_t in, int64_t row_chunks, int64_t col_chunks) {
  const auto largest_range = [](int64_t len, int64_t unit, int64_t chunks) {
    const int64_t units = (len + unit - 1) / unit;
    int64_t most = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t first = units * c / chunks * unit;
      const int64_t last = std::min(len, units * (c + 1) / chunks * unit);
      most = std::max(most, last - first);
    }
    return most;
  };
  return largest_range(out, kWgradRowTile, row_chunks) * largest_range(in, kWgradPanel, col_chunks);
}

// dY's compression as the direct micro-tile reads it (wgrad_kernels.h; m = 4: 2-bit indices).
struct DirectRows {
  const float* values;
  const uint8_t* indices;
  int64_t slots_per_row, row_bytes, rows;  // rows: of dYᵀ (out)
  int n;

  explicit DirectRows(const CompressedNm& dy)
      : values(dy.values.data()),
        indices(dy.indices.data()),
        slots_per_row(dy.value_cols()),
        row_bytes(dy.index_row_bytes()),
        rows(dy.cols),
        n(dy.pattern.n) {}

  // The tile's rows from `row`, in the K-block of `slots` slots from slot s0 (a multiple of 16, so
  // the block's first index is the first bit of a byte). `prefetch`: also fetch the rows of the
  // tile two ahead, which the next tiles of the first panel read (rows of dYᵀ are T / 4 · n
  // slots apart, too far apart for the hardware prefetchers).
  void set(int64_t row, int64_t s0, int slots, bool prefetch, detail::WgradTileArgs& ta) const {
    const int64_t byte = s0 / 4;
    const auto bytes = static_cast<size_t>(std::min<int64_t>(8, row_bytes - byte));
    ta.n = n;
    for (int r = 0; r < kWgradRowTile && row + r < rows; ++r) {
      const int64_t o = row + r;
      ta.row_values[r] = values + o * slots_per_row + s0;
      uint64_t word = 0;
      std::memcpy(&word, indices + o * row_bytes + byte, bytes);
      ta.row_indices[r] = word;
      const int64_t ahead = o + 2 * kWgradRowTile;
      if (prefetch && ahead < rows) {
        const auto* v = reinterpret_cast<const char*>(values + ahead * slots_per_row + s0);
        for (int64_t at = 0; at < int64_t{slots} * 4; at += 64) __builtin_prefetch(v + at, 0, 3);
        __builtin_prefetch(indices + ahead * row_bytes + byte, 0, 3);
      }
    }
  }
};

void check_dy(const CompressedNm& dy) {
  NMS_CHECK(dy.axis == NmAxis::kCols,
            "nm_wgrad: dY must be compressed along tokens (axis cols: groups run down each "
            "column of dY [T, out]), got axis ",
            axis_name(dy.axis));
  dy.pattern.validate();
  NMS_CHECK(dy.rows >= 0 && dy.cols >= 0, "nm_wgrad: negative dY shape (", dy.rows, " x ", dy.cols,
            ")");
  NMS_CHECK(dy.rows % dy.pattern.m == 0, "nm_wgrad: tokens (dY rows, ", dy.rows,
            ") is not a multiple of m (", dy.pattern.m, ")");
  const int64_t need = detail::mul_checked(dy.cols, dy.value_cols(), "dY values");
  NMS_CHECK(dy.values.size() == need, "nm_wgrad: dY has ", dy.values.size(), " values, its shape ",
            dy.rows, " x ", dy.cols, " at ", dy.pattern.to_string(), " needs ", need);
  NMS_CHECK(dy.indices.size() == dy.index_bytes(), "nm_wgrad: dY has ", dy.indices.size(),
            " index bytes, its shape needs ", dy.index_bytes());
#ifndef NDEBUG
  nm_validate(dy);
#endif
}

// kAuto: nm_gemm's kernel when dW is large (at least 8 M elements: 32 MB, past the caches, which
// kernel A re-reads once per 64-token block) and T is short (its own 128-token pair panels need
// many in features to fill, and at long T kernel A streams less). Measured on the Xeon (panel
// pairs), one thread, ms (kernel A / nm_gemm's; `nmsparse bench kernels --gemms weight_grad`): T x
// in -> out 512 x 4096 -> 4096 86.5 / 72.2, 512 x 784 -> 4096 17.8 / 20.8, 2048 x 2048 -> 2048
// 81.4 / 80.9, 8192 x 768 -> 3072 204.2 / 230.9, 8192 x 3072 -> 768 195.4 / 196.7, 6400 x 192 ->
// 768 14.9 / 20.5.
bool use_gemm_kernel(NmWgradKernel kernel, Isa isa, int64_t tokens, int64_t in, int64_t out) {
  if (kernel != NmWgradKernel::kAuto) return kernel == NmWgradKernel::kGemm;
  // At AVX2 (Zen 2, one thread, ms, kernel A / nm_gemm's, 2:4, with MVUE of dY): 2048 x 2048 ->
  // 2048 422.6 / 190.2, 8192 x 768 -> 3072 1185.3 / 538.4, 512 x 4096 -> 4096 376.4 / 184.1,
  // 6400 x 192 -> 768 55.4 / 43.3, 6400 x 768 -> 192 40.4 / 26.5; 4:8 133.9 / 125.5 and
  // 59.5 / 45.0 on the last two. Kernel A's 12 accumulators per 3-row tile leave 1.5 loads per FMA
  // and its dW sweeps go through masked loads and stores.
  if (isa == Isa::kAvx2) return true;
  // With single token panels (AMD CPUs, nm_gemm_panel_pairs) nm_gemm's kernel wins wherever X has
  // 512 columns or more. Zen 4, one thread, medians of 3 alternating calls, ms (kernel A /
  // nm_gemm's) at 4:8, 8:16, 16:32: T 8192 x 768 -> 3072 327 / 324, 297 / 285, 303 / 293; 8192 x
  // 3072 -> 768 305 / 291, 278 / 267, 281 / 267; 2048^3 136 / 118, 152 / 125, 131 / 120; 512 x 4096
  // -> 4096 128 / 115, 126 / 111, 147 / 126; 6400 x 768 -> 192 15.3 / 14.8, 20.3 / 18.9, 22.6
  // / 20.2; but 6400 x 192 -> 768 15.3 / 20.0, 16.0 / 19.4, 16.1 / 19.5.
  if (!detail::nm_gemm_panel_pairs()) return in >= 512;
  return out * in >= (int64_t{8} << 20) && tokens <= 2048;
}

#if defined(NMS_HAVE_AVX512_KERNELS)
// kAuto: the hybrid permute kernel where nm_gemm's permute kernel is the active one (Zen 4), m
// divides 16 and X has at least 512 columns. m <= 4 before the hybrid's 32 + 32-token super-tiles;
// with them, 4:8 / 8:16 ms (nm_gemm's broadcast kernel / permute, MVUE of dY included, one
// thread, `nmsparse bench kernels --gemms weight_grad`): T 8192 x 768 -> 3072 406.0 / 304.4,
// 339.6 / 299.4; 8192 x 3072 -> 768 276.4 / 255.5, 275.2 / 252.8; 2048^3 124.5 / 110.0, 123.2 /
// 110.1; 512 x 4096 -> 4096 114.1 / 107.0, 114.2 / 107.2. Earlier, one thread, Zen 4, ms (panels /
// gemm / permute; `bench_wgrad --benchmark_filter=Kernels`): 2:4 T x in -> out 8192 x 768 -> 3072
// 317.8 / 319.7 / 278.6, 8192 x 3072 -> 768 305.6 / 290.3 / 271.3, 2048 x 2048 -> 2048 135.7 /
// 128.4 / 112.6, 512 x 4096 -> 4096 131.0 / 123.6 / 118.1, 512 x 784 -> 4096 26.1 / 27.9 / 25.3; T
// 8192 x 768 -> 3072 at 1:4 150.1 / - / 148.6, 4:8 269.1 / - / 277.8, 8:16 271.1 / - / 277.9.
// Narrow X (the vision transformer's 192 features) is kernel A's: 6400 x 192 -> 768 15.1 / 20.5
// / 20.9, 6400 x 192 -> 576 11.0 / 15.1 / 16.2, 6400 x 768 -> 192 15.9 / 14.9 / 16.8 (a second
// run), and kernel A's direct micro-tile (m = 4) has since taken 6400 x 192 -> 768 to 13.5 ms.
bool use_permute_kernel(NmWgradKernel kernel, NmPattern pattern, int64_t in) {
  if (detail::kLaneChunk % pattern.m != 0) return false;
  if (kernel == NmWgradKernel::kAuto) {
    return in >= 512 && nm_gemm_kernel_active() == NmGemmKernel::kPermute;
  }
  return kernel == NmWgradKernel::kPermute;
}

// dWᵀ = Xᵀ · (dYᵀ)ᵀ on the permute kernel: its tokens are the in features (rows of Xᵀ), its rows
// the out features (rows of dYᵀ), its depth T; dW is its Y in the Yᵀ form. Each element is the
// chain over the row's slots in order from the start term, as in the other routes: the same bits.
// The operand (dYᵀ in its lane form, out rows, T deep) is in w.dy_t's lane buffers.
void wgrad_permute_from_lanes(int64_t out, NmPattern pattern, ConstMatrixViewF x, MatrixViewF dw,
                              NmWgradWorkspace& w, const NmWgradDecay* decay) {
  const int64_t tokens = x.rows();
  const int64_t in = x.cols();
  // Xᵀ rows padded to a multiple of 16 floats plus 16: no power-of-two stride between the 8 rows
  // a tile loads per chunk.
  const int64_t ld_t = (tokens + 15) / 16 * 16 + 16;
  const int64_t need = detail::mul_checked(in, ld_t, "nm_wgrad Xᵀ");
  if (w.x_t.size() < need) w.x_t.resize_for_overwrite(need);
  detail::NmGemmLaneArgs args;
  args.x = w.x_t.data();
  args.ldx = ld_t;
  args.values = w.dy_t.lane_values.data();
  args.lanes = w.dy_t.lane_index.data();
  args.rows = out;
  args.depth = tokens;
  args.n = pattern.n;
  args.m = pattern.m;
  args.y = dw.data();
  args.ldy = dw.ld();
  args.y_transposed = true;
  // A large dW's last K block is streamed. T 512 x 4096 -> 4096, medians, alternately in one
  // process, Zen 4: 108.4 against 112.8 ms and 111.3 against 119.2 ms (two runs, one thread),
  // 64.3 against 75.7 ms (two threads); 2048^3 and the T 8192 shapes (4 K blocks) within noise.
  args.y_stream = dw.size() * int64_t{4} >= detail::kWgradStreamBytes &&
                  reinterpret_cast<uintptr_t>(dw.data()) % 64 == 0 && dw.ld() % 16 == 0;
  // The hybrid kernel's panels of the product's X (= Xᵀ): per full super-tile of `super` in
  // features, its last 32, the load-fed ones, T rows; and Xᵀ rows of the other features. One pass
  // over X for both, in blocks of 256 tokens. Against the whole Xᵀ by transpose_into and then the
  // panels copied from X, one thread, Zen 4, medians of 9 alternating calls, two runs, ms: T 8192 x
  // 3072 15.2-21.7 -> 7.3-10.1, 8192 x 768 4.1-4.7 -> 1.7-2.4, 2048 x 2048 2.2-2.7 -> 1.0-1.2,
  // 512 x 4096 0.50-0.64 -> 0.32-0.35 (2:4's super-tiles of 64 features).
  const int64_t super = detail::lane_hybrid_tokens(pattern.n, pattern.m);
  const int64_t panels_need =
      detail::mul_checked(in / super, tokens * detail::kLanePanel, "nm_wgrad X panels");
  if (w.x_panels.size() < panels_need) w.x_panels.resize_for_overwrite(panels_need);
  detail::WgradSplitXArgs split;
  split.x = x.data();
  split.ldx = x.ld();
  split.tokens = tokens;
  split.in = in;
  split.super = super;
  split.x_t = w.x_t.data();
  split.ld_t = ld_t;
  split.panels = w.x_panels.data();
  split.stream = in * tokens * int64_t{4} >= detail::kWgradStreamBytes;
  constexpr int64_t kSplitTokens = 256;
  detail::parallel_for((tokens + kSplitTokens - 1) / kSplitTokens, [&](int64_t i) {
    detail::wgrad_split_x_avx512(split, i * kSplitTokens, std::min(tokens, (i + 1) * kSplitTokens));
  });
  args.x_panels = w.x_panels.data();
  if (decay != nullptr) {
    args.start_w = decay->w.data();
    args.start_ldw = decay->w.ld();
    args.start_keep = decay->keep;
    args.start_ldkeep = decay->keep_ld;
    args.start_lambda = decay->lambda;
  }
  detail::nm_gemm_lanes_run(args, in);
}

void wgrad_permute(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw, NmWgradWorkspace& w,
                   const NmWgradDecay* decay) {
  detail::wgrad_lanes_from_compressed(dy, w.dy_t.lane_values, w.dy_t.lane_index);
  wgrad_permute_from_lanes(dy.cols, dy.pattern, x, dw, w, decay);
}
#endif

}  // namespace

void detail::validate_wgrad_operands(int64_t tokens, int64_t out, ConstMatrixViewF x,
                                     MatrixViewF dw, const NmWgradDecay* decay) {
  const int64_t in = x.cols();
  NMS_CHECK(x.rows() == tokens, "nm_wgrad: x has ", x.rows(), " rows (tokens), dY has ", tokens);
  NMS_CHECK(dw.rows() == out && dw.cols() == in, "nm_wgrad: dw is ", dw.rows(), " x ", dw.cols(),
            ", expected [dY cols, x cols] = ", out, " x ", in);
  NMS_CHECK(!detail::views_overlap(x, dw), "nm_wgrad: dw overlaps x");
  if (decay != nullptr) {
    NMS_CHECK(decay->w.rows() == out && decay->w.cols() == in, "nm_wgrad: the decay's W is ",
              decay->w.rows(), " x ", decay->w.cols(), ", dw ", out, " x ", in);
    NMS_CHECK(decay->keep != nullptr && decay->keep_ld >= in,
              "nm_wgrad: the decay needs a mask "
              "with row stride >= in (",
              in, "), got ", decay->keep_ld);
    NMS_CHECK(!detail::views_overlap(decay->w, dw), "nm_wgrad: dw overlaps the decay's W");
  }
}

bool nm_wgrad_has_fast_path(NmPattern pattern) {
  return pattern.n >= 1 && pattern.n <= pattern.m && pattern.m <= kMaxGroupSize;
}

namespace {

// Every check of nm_wgrad's boundary (throws nms::Error naming the value).
void validate_nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                       const NmWgradDecay* decay) {
  check_dy(dy);
  detail::validate_wgrad_operands(dy.rows, dy.cols, x, dw, decay);
}

}  // namespace

std::string nm_wgrad_check(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw,
                           const NmWgradDecay* decay) {
  try {
    validate_nm_wgrad(dy, x, dw, decay);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw, NmWgradWorkspace* ws,
              const NmWgradDecay* decay, NmWgradKernel kernel) {
  validate_nm_wgrad(dy, x, dw, decay);
  const int64_t out = dy.cols;
  const int64_t in = x.cols();
  const int64_t tokens = dy.rows;
  if (out == 0 || in == 0) return;
  if (tokens == 0) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        dw(o, i) = decay != nullptr && decay->keep[o * decay->keep_ld + i] == 0
                       ? decay->lambda * decay->w(o, i)
                       : 0.0f;
      }
    }
    return;
  }

  NmWgradWorkspace local;
  NmWgradWorkspace& w = ws != nullptr ? *ws : local;
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() == Isa::kAvx512 && use_permute_kernel(kernel, dy.pattern, in)) {
    wgrad_permute(dy, x, dw, w, decay);
    return;
  }
  if (isa_active() >= Isa::kAvx2 && use_gemm_kernel(kernel, isa_active(), tokens, in, out)) {
    // dWᵀ = Xᵀ · (dYᵀ)ᵀ is nm_gemm's product with A = dYᵀ [out, T] (N:M along T) and the in
    // features of X as its tokens; its kernel keeps each output block in L2 across the whole
    // reduction and walks 128-token panel pairs (nm_gemm.h). In the transposed form it reads X's
    // rows as its panel rows and writes its output blocks as rows of dW, each element the same
    // chain as below (slots in order, from 0 or the decay term): the same bits.
    try {
      detail::nm_gemm_pack_entries_into(dy, w.dy_t);
    } catch (const Error& e) {  // name the argument: rows of dYᵀ are columns of dY
      NMS_THROW("dY (as dYᵀ, a row per column of dY): ", e.what());
    }
    detail::NmGemmArgs args;
    args.x = x.data();
    args.ldx = x.ld();
    args.packed = w.dy_t.packed.data();
    args.shared = w.dy_t.shared.data();
    args.rows = out;
    args.depth = tokens;
    args.n = dy.pattern.n;
    args.m = dy.pattern.m;
    args.depth_block = w.dy_t.depth_block;
    args.y = dw.data();
    args.ldy = dw.ld();
    args.transposed = true;
    args.panel_pairs = detail::nm_gemm_panel_pairs();
    if (decay != nullptr) {
      args.start_w = decay->w.data();
      args.start_ldw = decay->w.ld();
      args.start_keep = decay->keep;
      args.start_ldkeep = decay->keep_ld;
      args.start_lambda = decay->lambda;
    }
    detail::nm_gemm_simd(args, in, isa_active() == Isa::kAvx512);
    return;
  }
#endif

  const int n = dy.pattern.n;
  const int m = dy.pattern.m;
  const int64_t k_block = k_block_for(dy.pattern);
  const int64_t slots_per_row = dy.value_cols();
  const int64_t row_bytes = dy.index_row_bytes();
  // group_token[s] = first token of slot s's group, s counted from the start of a K-block.
  int32_t group_token[kWgradMaxBlockSlots + 16] = {};
  for (int s = 0; s < kWgradMaxBlockSlots; ++s) group_token[s] = s / n * m;

  const Isa isa = isa_active();
  detail::WgradTileFn tile_fn = detail::wgrad_tile_scalar;
  detail::WgradDecodeFn decode_fn = detail::wgrad_decode_scalar;
#if defined(NMS_HAVE_AVX512_KERNELS)
  // m = 4 with 1 or 2 kept (2-bit indices, 2:4 and 1:4): the direct micro-tile reads dY's
  // compression as it is, with no decoding pass (wgrad_kernels.h).
  const bool direct = isa == Isa::kAvx512 && m == 4 && n <= 2;
  if (isa == Isa::kAvx512) {
    tile_fn = direct ? detail::wgrad_tile_m4_avx512 : detail::wgrad_tile_avx512;
    decode_fn = detail::wgrad_decode_avx512;
  } else if (isa == Isa::kAvx2) {
    tile_fn = detail::wgrad_tile_avx2;  // the scalar decoder: decoding is a small share here
  }
#else
  constexpr bool direct = false;
#endif
  (void)isa;
  static_assert(kKBlockTarget / 4 * 2 <= detail::kWgradDirectMaxSlots, "a direct K-block, m = 4");
  const DirectRows direct_rows(dy);

  // Work items own disjoint blocks of dW. Splitting the rows makes every item pack all of X
  // (T · in floats), splitting the columns makes every item decode (direct form: read) all of
  // dY (T · out · n/m slots): between equally balanced splits, the one whose duplicated packing
  // is smaller.
  const int64_t panels = (in + kWgradPanel - 1) / kWgradPanel;
  const int64_t tiles = (out + kWgradRowTile - 1) / kWgradRowTile;
  const int64_t threads = std::max(1, max_threads());
  // Where the panels or tiles do not split evenly, the split whose largest item is smaller wins
  // first: split by columns, the vision transformer's 192 x 192 projection gives one thread a
  // 128-column panel and the other a 64-column one (T 6400, MVUE 2:4, Zen 4, wgrad without the
  // pruning: 3.5 ms on one thread, 2.6 ms on two split by columns, 1.8 ms by rows).
  int64_t col_chunks = 1;
  int64_t row_chunks = 1;
  if (threads > 1) {
    const int64_t rows_first_rows = std::min(tiles, threads);
    const int64_t rows_first_cols =
        std::min(panels, std::max<int64_t>(1, threads / rows_first_rows));
    const int64_t cols_first_cols = std::min(panels, threads);
    const int64_t cols_first_rows =
        std::min(tiles, std::max<int64_t>(1, threads / cols_first_cols));
    const int64_t rows_first_item = largest_item(out, in, rows_first_rows, rows_first_cols);
    const int64_t cols_first_item = largest_item(out, in, cols_first_rows, cols_first_cols);
    const bool rows_first =
        rows_first_item != cols_first_item ? rows_first_item < cols_first_item : in * m < out * n;
    row_chunks = rows_first ? rows_first_rows : cols_first_rows;
    col_chunks = rows_first ? rows_first_cols : cols_first_cols;
  }
  const int64_t items = col_chunks * row_chunks;
  const int64_t max_chunk_panels = (panels + col_chunks - 1) / col_chunks;
  const int64_t x_floats = k_block * max_chunk_panels * kWgradPanel;
  const int64_t tile_words = kChunkTiles * kWgradTileWords;

  const int64_t x_need = detail::mul_checked(items, x_floats, "nm_wgrad X panels");
  if (w.x_panels.size() < x_need) w.x_panels.resize_for_overwrite(x_need);
  if (w.tile_values.size() < items * tile_words) {
    w.tile_values.resize_for_overwrite(items * tile_words);
    w.tile_offsets.resize_for_overwrite(items * tile_words);
  }

  detail::parallel_for(items, [&](int64_t item) {
    const int64_t cc = item % col_chunks;
    const int64_t rc = item / col_chunks;
    const int64_t p0 = panels * cc / col_chunks;
    const int64_t p1 = panels * (cc + 1) / col_chunks;
    const int64_t b0 = tiles * rc / row_chunks;
    const int64_t b1 = tiles * (rc + 1) / row_chunks;
    float* xbuf = w.x_panels.data() + item * x_floats;
    float* vals = w.tile_values.data() + item * tile_words;
    int32_t* offs = w.tile_offsets.data() + item * tile_words;
    detail::WgradDecodeArgs da{};
    da.row_bytes = row_bytes;
    da.bits = dy.pattern.index_bits();
    da.m = m;
    da.group_token = group_token;
    for (int64_t t0 = 0; t0 < tokens; t0 += k_block) {
      const int64_t kc = std::min(k_block, tokens - t0);
      const int64_t s0 = t0 / m * n;
      const int ns = static_cast<int>(kc / m * n);
      pack_x_block(x, t0, kc, k_block, p0 * kWgradPanel, p1 - p0, xbuf);
      for (int64_t bc = b0; bc < b1; bc += kChunkTiles) {
        const int64_t bc_end = std::min(b1, bc + kChunkTiles);
        // Decode the chunk's rows of dYᵀ for this K-block into packed tiles.
        for (int64_t b = bc; b < bc_end && !direct; ++b) {
          for (int r = 0; r < kWgradRowTile; ++r) {
            const int64_t o = b * kWgradRowTile + r;
            const int64_t at = (b - bc) * kWgradTileWords + r * detail::kWgradSlotStride;
            if (o >= out) {
              std::fill(vals + at, vals + at + ns, 0.0f);
              std::fill(offs + at, offs + at + ns, 0);
              continue;
            }
            da.values = dy.values.data() + o * slots_per_row + s0;
            da.indices = dy.indices.data() + o * row_bytes;
            da.s0 = s0;
            da.slots = ns;
            // Rows of dYᵀ are T / m · n slots apart, too far for the hardware prefetcher:
            // fetch the same row of the next chunk (decoded soon) into L2 now.
            if (o + kChunkTiles * kWgradRowTile < std::min(out, b1 * kWgradRowTile)) {
              const int64_t ahead = kChunkTiles * kWgradRowTile;
              const char* nv = reinterpret_cast<const char*>(da.values + ahead * slots_per_row);
              for (int64_t byte = 0; byte < ns * 4; byte += 64) __builtin_prefetch(nv + byte, 0, 2);
              __builtin_prefetch(da.indices + ahead * row_bytes + s0 * da.bits / 8, 0, 2);
            }
            NMS_CHECK(decode_fn(da, vals + at, offs + at), "nm_wgrad: dY column ", o,
                      " has an index >= m (", m, ") in tokens [", t0, ", ", t0 + kc, ")");
          }
        }
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t col = p * kWgradPanel;
          const float* panel = xbuf + (p - p0) * k_block * kWgradPanel;
          detail::WgradTileArgs ta{};
          ta.slots = ns;
          ta.panel = panel;
          ta.ldc = dw.ld();
          ta.cols = static_cast<int>(std::min<int64_t>(kWgradPanel, in - col));
          ta.first = t0 == 0;
          for (int64_t b = bc; b < bc_end; ++b) {
            const int64_t row = b * kWgradRowTile;
            ta.vals = vals + (b - bc) * kWgradTileWords;
            ta.offs = offs + (b - bc) * kWgradTileWords;
            ta.c = dw.row(row) + col;
            ta.rows = static_cast<int>(std::min<int64_t>(kWgradRowTile, out - row));
            if (decay != nullptr && ta.first) {
              ta.decay_w = decay->w.row(row) + col;
              ta.decay_ld_w = decay->w.ld();
              ta.decay_keep = decay->keep + row * decay->keep_ld + col;
              ta.decay_ld_keep = decay->keep_ld;
              ta.decay = decay->lambda;
            }
            if (direct) direct_rows.set(row, s0, ns, p == p0, ta);
            ta.next_c = nullptr;
            if (b + 1 < bc_end) {
              ta.next_c = dw.row(row + kWgradRowTile) + col;
              ta.next_rows =
                  static_cast<int>(std::min<int64_t>(kWgradRowTile, out - row - kWgradRowTile));
            } else if (p + 1 < p1) {
              ta.next_c = dw.row(bc * kWgradRowTile) + col + kWgradPanel;
              ta.next_rows = kWgradRowTile;
            }
            tile_fn(ta);
          }
        }
      }
    }
  });
}

void nm_wgrad_pruned(ConstMatrixViewF dy, const GradPruneOptions& prune, ConstMatrixViewF x,
                     MatrixViewF dw, NmWgradWorkspace* ws, const NmWgradDecay* decay,
                     NmWgradKernel kernel) {
  NMS_CHECK(prune.axis == NmAxis::kCols,
            "nm_wgrad_pruned: dY must be pruned along tokens (axis cols), got axis ",
            axis_name(prune.axis));
  NmWgradWorkspace local;
  NmWgradWorkspace& w = ws != nullptr ? *ws : local;
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() == Isa::kAvx512 && dy.rows() > 0 && dy.cols() > 0 && x.cols() > 0 &&
      use_permute_kernel(kernel, prune.pattern, x.cols()) &&
      detail::grad_prune_lanes_applies(dy, prune)) {
    detail::validate_wgrad_operands(dy.rows(), dy.cols(), x, dw, decay);
    const detail::NmGemmLaneLayout lay(dy.cols(), dy.rows(), prune.pattern.n, prune.pattern.m);
    // The layout grad_prune_lanes(24) writes (prune_lanes.h), in this layer's terms.
    NMS_ASSERT(detail::kLaneRows == 32 && detail::kLaneChunk == 16 &&
               lay.slots_per_chunk == 16 / prune.pattern.m * prune.pattern.n &&
               lay.total() == dy.cols() / 32 * (dy.rows() / 16) * lay.slots_per_chunk * 32);
    if (w.dy_t.lane_values.size() != lay.total()) {
      w.dy_t.lane_values.resize_for_overwrite(lay.total());
      w.dy_t.lane_index.resize_for_overwrite(lay.total());
    }
    // 2:4 has a kernel of its own: MVUE of dY 8192 x 3072 into the lane form, one thread, Zen 4,
    // 17.0 ms against 37.2 for the any-n:m one (1:2 43.2, 1:4 34.0, 4:8 42.2, 8:16 44.2 ms).
    if (detail::grad_prune_lanes24_applies(dy, prune)) {
      detail::grad_prune_lanes24(dy, prune, w.dy_t.lane_values.data(), w.dy_t.lane_index.data());
    } else {
      detail::grad_prune_lanes(dy, prune, w.dy_t.lane_values.data(), w.dy_t.lane_index.data());
    }
    wgrad_permute_from_lanes(dy.cols(), prune.pattern, x, dw, w, decay);
    return;
  }
#endif
  grad_prune_compressed_into(dy, prune, w.pruned_dy);
  nm_wgrad(w.pruned_dy, x, dw, &w, decay, kernel);
}

}  // namespace nms
