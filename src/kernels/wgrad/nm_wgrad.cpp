// nm_wgrad driver: validation, packing of dYᵀ and of the X panels, ISA dispatch, work items and
// the loop nest around the micro-kernel (see nm_wgrad.h and wgrad_kernels.h).
#include "nmsparse/kernels/nm_wgrad.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "kernels/wgrad/wgrad_kernels.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

using detail::kWgradPanel;
using detail::kWgradRowTile;
using detail::WgradSlot;

// Tokens per K-block (rounded down to a multiple of m): a [128][64] float X panel is 32 KiB and
// stays in the 48 KiB L1 while a chunk of row tiles streams its slots past it.
constexpr int64_t kKBlockTarget = 128;
// Row tiles per chunk: the chunk's packed slots for one K-block (16 · 6 rows · 64 slots · 8 B =
// 48 KiB at 2:4) stay in L2 while the item's panels go past them.
constexpr int64_t kChunkTiles = 16;

int64_t k_block_for(NmPattern p) {
  return std::max<int64_t>(1, kKBlockTarget / p.m) * p.m;
}

bool overlaps(const float* a, int64_t a_rows, int64_t a_ld, int64_t a_cols, const float* b,
              int64_t b_rows, int64_t b_ld, int64_t b_cols) {
  if (a_rows == 0 || a_cols == 0 || b_rows == 0 || b_cols == 0) return false;
  const float* a_end = a + (a_rows - 1) * a_ld + a_cols;
  const float* b_end = b + (b_rows - 1) * b_ld + b_cols;
  return a < b_end && b < a_end;
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

}  // namespace

bool nm_wgrad_has_fast_path(NmPattern pattern) {
  return pattern.n >= 1 && pattern.n <= pattern.m && pattern.m <= kMaxGroupSize;
}

void nm_wgrad_pack_into(const CompressedNm& dy, NmWgradOperand& dst) {
  NMS_CHECK(dy.axis == NmAxis::kCols,
            "nm_wgrad: dY must be compressed along tokens (axis cols: groups run down each "
            "column of dY [T, out]), got axis ",
            axis_name(dy.axis));
  dy.pattern.validate();
  const int n = dy.pattern.n;
  const int m = dy.pattern.m;
  NMS_CHECK(dy.rows >= 0 && dy.cols >= 0, "nm_wgrad: negative dY shape (", dy.rows, " x ", dy.cols,
            ")");
  NMS_CHECK(dy.rows % m == 0, "nm_wgrad: tokens (dY rows, ", dy.rows, ") is not a multiple of m (",
            m, ")");
  const int64_t out = dy.cols;
  const int64_t slots_per_row = dy.value_cols();
  NMS_CHECK(dy.values.size() == detail::mul_checked(out, slots_per_row, "dY values"),
            "nm_wgrad: dY has ", dy.values.size(), " values, its shape ", dy.rows, " x ", dy.cols,
            " at ", dy.pattern.to_string(), " needs ", out * slots_per_row);
  NMS_CHECK(dy.indices.size() == dy.index_bytes(), "nm_wgrad: dY has ", dy.indices.size(),
            " index bytes, its shape needs ", dy.index_bytes());
#ifndef NDEBUG
  nm_validate(dy);
#endif
  const int64_t tiles = (out + kWgradRowTile - 1) / kWgradRowTile;
  const int64_t total =
      detail::mul_checked(detail::mul_checked(tiles, kWgradRowTile, "nm_wgrad operand"),
                          slots_per_row, "nm_wgrad operand");
  dst.rows = out;
  dst.tokens = dy.rows;
  dst.pattern = dy.pattern;
  dst.k_block = k_block_for(dy.pattern);
  if (dst.slots.size() != total) dst.slots.resize_for_overwrite(total);
  auto* slots = reinterpret_cast<WgradSlot*>(dst.slots.data());
  const int bits = dy.pattern.index_bits();
  const int64_t row_bytes = dy.index_row_bytes();
  const int64_t k_block = dst.k_block;
  detail::parallel_for(tiles, [&](int64_t b) {
    WgradSlot* tile = slots + b * kWgradRowTile * slots_per_row;
    for (int r = 0; r < kWgradRowTile; ++r) {
      const int64_t o = b * kWgradRowTile + r;
      WgradSlot* e = tile + r;
      if (o >= out) {
        for (int64_t s = 0; s < slots_per_row; ++s) e[s * kWgradRowTile] = WgradSlot{0.0f, 0};
        continue;
      }
      const float* v = dy.values.data() + o * slots_per_row;
      const uint8_t* ix = dy.indices.data() + o * row_bytes;
      int64_t group_token = 0;  // first token of the current group
      int j = 0;                // slot inside the group
      int64_t bit = 0;
      for (int64_t s = 0; s < slots_per_row; ++s) {
        int idx = 0;
        if (bits > 0) {
          const int64_t byte = bit >> 3;
          unsigned word = ix[byte];
          if (byte + 1 < row_bytes) word |= static_cast<unsigned>(ix[byte + 1]) << 8;
          idx = static_cast<int>((word >> (bit & 7)) & ((1u << bits) - 1u));
          bit += bits;
        }
        NMS_CHECK(idx < m, "nm_wgrad: dY column ", o, " slot ", s, " has index ", idx, " >= m (", m,
                  ")");
        const int64_t token = group_token + idx;
        e[s * kWgradRowTile] =
            WgradSlot{v[s], static_cast<int32_t>((token % k_block) * kWgradPanel * sizeof(float))};
        if (++j == n) {
          j = 0;
          group_token += m;
        }
      }
    }
  });
}

NmWgradOperand nm_wgrad_pack(const CompressedNm& dy) {
  NmWgradOperand a;
  nm_wgrad_pack_into(dy, a);
  return a;
}

void nm_wgrad(const NmWgradOperand& a, ConstMatrixViewF x, MatrixViewF dw, NmWgradWorkspace* ws) {
  NMS_CHECK(a.k_block > 0 && a.k_block % a.pattern.m == 0,
            "nm_wgrad: the operand is not packed (use nm_wgrad_pack)");
  const int64_t out = a.rows;
  const int64_t in = x.cols();
  const int64_t tokens = a.tokens;
  NMS_CHECK(x.rows() == tokens, "nm_wgrad: x has ", x.rows(), " rows (tokens), dY has ", tokens);
  NMS_CHECK(dw.rows() == out && dw.cols() == in, "nm_wgrad: dw is ", dw.rows(), " x ", dw.cols(),
            ", expected [dY cols, x cols] = ", out, " x ", in);
  NMS_CHECK(
      !overlaps(x.data(), x.rows(), x.ld(), x.cols(), dw.data(), dw.rows(), dw.ld(), dw.cols()),
      "nm_wgrad: dw overlaps x");
  const int64_t slots_per_row = tokens / a.pattern.m * a.pattern.n;
  const int64_t tiles = (out + kWgradRowTile - 1) / kWgradRowTile;
  NMS_CHECK(a.slots.size() == tiles * kWgradRowTile * slots_per_row,
            "nm_wgrad: the operand's buffer (", a.slots.size(),
            " entries) does not match its shape");
  if (out == 0 || in == 0) return;
  if (tokens == 0) {
    for (int64_t o = 0; o < out; ++o) std::fill(dw.row(o), dw.row(o) + in, 0.0f);
    return;
  }

  const Isa isa = isa_active();
  detail::WgradTileFn tile_fn = detail::wgrad_tile_scalar;
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa == Isa::kAvx512) tile_fn = detail::wgrad_tile_avx512;
#endif
  (void)isa;

  // Work items: column chunks of whole panels first, then row ranges of whole tiles when there are
  // fewer panels than threads. Items own disjoint blocks of dW.
  const int64_t panels = (in + kWgradPanel - 1) / kWgradPanel;
  const int64_t threads = std::max(1, max_threads());
  const int64_t col_chunks = std::min(panels, threads);
  const int64_t row_chunks = std::min(tiles, std::max<int64_t>(1, threads / col_chunks));
  const int64_t items = col_chunks * row_chunks;
  const int64_t max_chunk_panels = (panels + col_chunks - 1) / col_chunks;
  const int64_t k_block = a.k_block;
  const int64_t item_floats = k_block * max_chunk_panels * kWgradPanel;

  NmWgradWorkspace local;
  NmWgradWorkspace& w = ws != nullptr ? *ws : local;
  const int64_t need = detail::mul_checked(items, item_floats, "nm_wgrad X panels");
  if (w.x_panels.size() < need) w.x_panels.resize_for_overwrite(need);

  const auto* slots = reinterpret_cast<const WgradSlot*>(a.slots.data());
  const int n = a.pattern.n;
  const int m = a.pattern.m;
  detail::parallel_for(items, [&](int64_t item) {
    const int64_t cc = item % col_chunks;
    const int64_t rc = item / col_chunks;
    const int64_t p0 = panels * cc / col_chunks;
    const int64_t p1 = panels * (cc + 1) / col_chunks;
    const int64_t b0 = tiles * rc / row_chunks;
    const int64_t b1 = tiles * (rc + 1) / row_chunks;
    float* buf = w.x_panels.data() + item * item_floats;
    for (int64_t t0 = 0; t0 < tokens; t0 += k_block) {
      const int64_t kc = std::min(k_block, tokens - t0);
      const int64_t s0 = t0 / m * n;
      const int64_t ns = kc / m * n;
      const bool first = t0 == 0;
      pack_x_block(x, t0, kc, k_block, p0 * kWgradPanel, p1 - p0, buf);
      for (int64_t bc = b0; bc < b1; bc += kChunkTiles) {
        const int64_t bc_end = std::min(b1, bc + kChunkTiles);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t col = p * kWgradPanel;
          const int cols = static_cast<int>(std::min<int64_t>(kWgradPanel, in - col));
          const float* panel = buf + (p - p0) * k_block * kWgradPanel;
          for (int64_t b = bc; b < bc_end; ++b) {
            const int64_t row = b * kWgradRowTile;
            const int rows = static_cast<int>(std::min<int64_t>(kWgradRowTile, out - row));
            tile_fn(slots + (b * slots_per_row + s0) * kWgradRowTile, ns, panel, dw.row(row) + col,
                    dw.ld(), rows, cols, first);
          }
        }
      }
    }
  });
}

void nm_wgrad(const CompressedNm& dy, ConstMatrixViewF x, MatrixViewF dw, NmWgradWorkspace* ws) {
  if (ws != nullptr) {
    nm_wgrad_pack_into(dy, ws->operand);
    nm_wgrad(ws->operand, x, dw, ws);
    return;
  }
  NmWgradWorkspace local;
  nm_wgrad_pack_into(dy, local.operand);
  nm_wgrad(local.operand, x, dw, &local);
}

}  // namespace nms
