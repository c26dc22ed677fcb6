// nm_gemm driver: validation, ISA dispatch, threading over token panels, and the scalar path (the
// AVX-512 kernel's specification: the same fused multiply-add chain per output element).
#include "nmsparse/kernels/nm_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "core/views_overlap.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

// Row t of Y: y(t, r) = fma chain over the kept slots of row r of A, in order, from 0.
void row_scalar(ConstMatrixViewF x, const NmGemmOperand& a, const detail::NmGemmLayout& lay,
                MatrixViewF y, int64_t t) {
  const float* xr = x.row(t);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t tile = r / kNmGemmTileRows;
    const int64_t l = r % kNmGemmTileRows;
    float acc = 0.0f;
    for (int64_t g = 0; g < lay.slots_per_row; ++g) {
      const float* e = a.packed.data() + lay.entry(tile, g, l);
      int32_t offset;
      std::memcpy(&offset, e + 1, sizeof(offset));
      const int64_t col = g / lay.slots_per_block * lay.depth_block + offset / kNmGemmPanel;
      acc = std::fma(xr[col], e[0], acc);
    }
    y(t, r) = acc;
  }
}

// The blocking of a call with `tokens` rows of X on `threads` threads; tokens < 0: of the largest
// calls (nm_gemm_scratch_bytes). Results do not depend on it: every output element is the same
// fused multiply-add chain whatever the blocking.
detail::NmGemmBlocking choose_blocking(const detail::NmGemmLayout& lay, int64_t tokens,
                                       int64_t threads) {
  detail::NmGemmBlocking k;
  k.tiles = lay.tiles;
  k.units = (lay.tiles + 7) / 8;
  // Groups of nearly equal size, at most kNmGemmGroupPanels panels.
  const int64_t panels =
      tokens < 0 ? kNmGemmGroupPanels : (tokens + kNmGemmPanel - 1) / kNmGemmPanel;
  int64_t groups = (panels + kNmGemmGroupPanels - 1) / kNmGemmGroupPanels;
  k.group_panels = (panels + groups - 1) / groups;
  if (tokens < 0) groups = int64_t{1} << 40;  // unbounded
  int64_t chunks = (k.units + kNmGemmChunkRows / 48 - 1) / (kNmGemmChunkRows / 48);
  // A slab: as many groups as kNmGemmSlabFloats holds, at least enough for every thread.
  int64_t slab_groups = kNmGemmSlabFloats / (k.group_panels * lay.panel_floats());
  slab_groups = std::max(slab_groups, (threads + chunks - 1) / chunks);
  slab_groups = std::clamp<int64_t>(slab_groups, 1, groups);
  k.slab_panels = slab_groups * k.group_panels;
  // More (smaller) chunks when that gives every thread the same number of items.
  for (int64_t n = chunks; n <= k.units && threads > 1; ++n) {
    if (n * slab_groups % threads == 0) {
      chunks = n;
      break;
    }
  }
  k.chunks = chunks;
  return k;
}

int64_t worker_floats(const detail::NmGemmBlocking& k) {
  return k.group_panels * detail::nm_gemm_out_rows(k.max_chunk_tiles()) * kNmGemmPanel;
}

}  // namespace

int64_t nm_gemm_scratch_bytes(const NmGemmOperand& a) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() >= Isa::kAvx2 && a.depth > 0 && a.rows > 0) {
    const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
    const detail::NmGemmBlocking k = choose_blocking(lay, -1, max_threads());
    return (worker_floats(k) + k.slab_panels * lay.panel_floats()) *
           static_cast<int64_t>(sizeof(float));
  }
#endif
  (void)a;
  return 0;
}

void nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y) {
  NMS_CHECK(x.cols() == a.depth, "nm_gemm: x has ", x.cols(), " columns, the operand's depth is ",
            a.depth);
  NMS_CHECK(y.rows() == x.rows() && y.cols() == a.rows, "nm_gemm: y is ", y.rows(), " x ", y.cols(),
            ", expected ", x.rows(), " x ", a.rows);
  NMS_CHECK(!detail::views_overlap(x, y), "nm_gemm: y overlaps x");
  const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  NMS_CHECK(
      a.packed.size() == lay.total_floats() && a.shared.size() == lay.depth_blocks * lay.tiles,
      "nm_gemm: the operand is not packed (use nm_gemm_pack)");
  const int64_t tokens = x.rows();
  if (tokens == 0 || a.rows == 0) return;
#if defined(NMS_HAVE_AVX512_KERNELS)
  const Isa isa = isa_active();
  if (isa >= Isa::kAvx2 && a.depth > 0) {
    const detail::NmGemmArgs args{x.data(), x.ld(),      a.packed.data(), a.shared.data(), a.rows,
                                  a.depth,  a.pattern.n, a.pattern.m,     y.data(),        y.ld()};
    const detail::NmGemmBlocking k = choose_blocking(lay, tokens, max_threads());
    const int64_t panel_floats = lay.panel_floats();
    const int64_t scratch_floats = worker_floats(k);
    // The calling thread's Xᵀ workspace (one slab of packed panels), reused by later calls.
    thread_local AlignedBuffer<float> xt;
    if (xt.size() < k.slab_panels * panel_floats) {
      xt.resize_for_overwrite(k.slab_panels * panel_floats);
    }
    float* const xt_data = xt.data();
    for (int64_t s0 = 0; s0 < tokens; s0 += k.slab_panels * kNmGemmPanel) {
      const int64_t slab_tokens = std::min(k.slab_panels * kNmGemmPanel, tokens - s0);
      const int64_t slab_panels = (slab_tokens + kNmGemmPanel - 1) / kNmGemmPanel;
      const auto pack = [&](int64_t p) {  // panel p of the slab
        const int64_t t0 = s0 + p * kNmGemmPanel;
        const int64_t width = std::min(kNmGemmPanel, tokens - t0);
        if (isa == Isa::kAvx512) {
          detail::nm_gemm_avx512_pack_x(args, t0, width, xt_data + p * panel_floats);
        } else {
          detail::nm_gemm_avx2_pack_x(args, t0, width, xt_data + p * panel_floats);
        }
      };
      // With one row chunk no two items share a panel: each packs its own (one parallel region
      // instead of two, which matters for small calls).
      const bool pack_in_items = k.chunks == 1;
      if (!pack_in_items) detail::parallel_for(slab_panels, pack);
      // Work items (row chunk, panel group): each owns its block of Y, so results do not depend
      // on the thread count. Scratch (the group's output blocks) is per thread and reused.
      const int64_t groups = (slab_panels + k.group_panels - 1) / k.group_panels;
      detail::parallel_for(k.chunks * groups, [&](int64_t i) {
        thread_local AlignedBuffer<float> scratch;
        if (scratch.size() < scratch_floats) scratch.resize_for_overwrite(scratch_floats);
        const int64_t chunk = i % k.chunks;
        const int64_t p0 = i / k.chunks * k.group_panels;
        const int64_t t0 = s0 + p0 * kNmGemmPanel;
        const int64_t count = std::min(k.group_panels * kNmGemmPanel, s0 + slab_tokens - t0);
        const int64_t tile0 = k.chunk_begin(chunk);
        const int64_t tile1 = k.chunk_begin(chunk + 1);
        if (pack_in_items) {
          for (int64_t p = p0; p < std::min(p0 + k.group_panels, slab_panels); ++p) pack(p);
        }
        const float* xt_group = xt_data + p0 * panel_floats;
        if (isa == Isa::kAvx512) {
          detail::nm_gemm_avx512_block(args, tile0, tile1, t0, count, xt_group, scratch.data());
        } else {
          detail::nm_gemm_avx2_block(args, tile0, tile1, t0, count, xt_group, scratch.data());
        }
      });
    }
    return;
  }
#endif
  detail::parallel_for(tokens, [&](int64_t t) { row_scalar(x, a, lay, y, t); });
}

}  // namespace nms
