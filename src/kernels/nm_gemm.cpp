// nm_gemm driver: validation, ISA dispatch, threading over token panels, and the scalar path (the
// AVX-512 kernel's specification: the same fused multiply-add chain per output element).
#include "nmsparse/kernels/nm_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/parallel.h"
#include "core/views_overlap.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_bias.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

// Row t of Y: y(t, r) = fma chain over the kept slots of row r of A, in order, from 0.
void row_scalar(ConstMatrixViewF x, const NmGemmOperand& a, const detail::NmGemmLayout& lay,
                MatrixViewF y, const float* bias, int64_t t) {
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
  detail::add_bias(y.data(), y.ld(), t, t + 1, 0, a.rows, bias);
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
  const int64_t gmax = kNmGemmGroupPanels;
  const int64_t panels = tokens < 0 ? gmax : (tokens + kNmGemmPanel - 1) / kNmGemmPanel;
  int64_t groups = (panels + gmax - 1) / gmax;
  k.group_panels = (panels + groups - 1) / groups;
  if (tokens < 0) groups = int64_t{1} << 40;  // unbounded
  const int64_t max_units = kNmGemmChunkRows / 48;
  int64_t chunks = (k.units + max_units - 1) / max_units;
  // One row chunk: no panel is shared, so each item packs its own, a depth block at a time, into
  // L2 (the shared workspace would be written and read back through memory: 8192 x 3072 -> 768
  // measured 7 % slower with it).
  k.own_pack = chunks == 1;
  int64_t slab_groups = groups;
  if (!k.own_pack) {  // as many groups as kNmGemmSlabFloats holds, at least one per thread
    slab_groups = kNmGemmSlabFloats / (k.group_panels * lay.panel_floats());
    slab_groups = std::clamp<int64_t>(std::max<int64_t>(slab_groups, threads), 1, groups);
  }
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

// Floats of one worker's scratch: the output blocks of a group, and its Xᵀ block panels when it
// packs them itself.
int64_t worker_floats(const detail::NmGemmBlocking& k, const detail::NmGemmLayout& lay) {
  return k.group_panels *
         (detail::nm_gemm_out_rows(k.max_chunk_tiles()) + (k.own_pack ? lay.depth_block : 0)) *
         kNmGemmPanel;
}

}  // namespace

#if defined(NMS_HAVE_AVX512_KERNELS)
namespace detail {

void nm_gemm_simd(const NmGemmArgs& args, int64_t tokens, bool avx512) {
  const NmGemmLayout lay(args.rows, args.depth, args.n, args.m, args.depth_block);
  const NmGemmBlocking k = choose_blocking(lay, tokens, max_threads());
  const int64_t scratch_floats = worker_floats(k, lay);
  // A work item: rows [chunk_begin(chunk), chunk_begin(chunk + 1)) of tiles x panels
  // [p0, p0 + group_panels) of the slab starting at token s0 (capped at `end`). Each owns its
  // block of Y, so results do not depend on the thread count. Scratch (the group's output
  // blocks) is per thread and reused.
  const auto item = [&](int64_t chunk, int64_t p0, int64_t s0, int64_t end, const float* xt) {
    thread_local AlignedBuffer<float> scratch;
    if (scratch.size() < scratch_floats) scratch.resize_for_overwrite(scratch_floats);
    const int64_t t0 = s0 + p0 * kNmGemmPanel;
    const int64_t count = std::min(k.group_panels * kNmGemmPanel, end - t0);
    const int64_t tile0 = k.chunk_begin(chunk);
    const int64_t tile1 = k.chunk_begin(chunk + 1);
    if (avx512) {
      nm_gemm_avx512_block(args, tile0, tile1, t0, count, xt, scratch.data());
    } else {
      nm_gemm_avx2_block(args, tile0, tile1, t0, count, xt, scratch.data());
    }
    if (!args.transposed) {
      add_bias(args.y, args.ldy, t0, t0 + count, tile0 * kNmGemmTileRows,
               std::min(args.rows, tile1 * kNmGemmTileRows), args.bias);
    }
  };
  if (k.own_pack) {  // one row chunk: each item packs its panels, a depth block at a time
    const int64_t groups =
        (tokens + k.group_panels * kNmGemmPanel - 1) / (k.group_panels * kNmGemmPanel);
    parallel_for(k.chunks * groups, [&](int64_t i) {
      item(i % k.chunks, i / k.chunks * k.group_panels, 0, tokens, nullptr);
    });
    return;
  }
  // Several row chunks share each packed panel: Xᵀ is packed first, a slab of panels at a time,
  // into the calling thread's workspace (reused by later calls).
  const int64_t panel_floats = lay.panel_floats();
  thread_local AlignedBuffer<float> xt;
  if (xt.size() < k.slab_panels * panel_floats) {
    xt.resize_for_overwrite(k.slab_panels * panel_floats);
  }
  float* const xt_data = xt.data();
  for (int64_t s0 = 0; s0 < tokens; s0 += k.slab_panels * kNmGemmPanel) {
    const int64_t slab_end = std::min(s0 + k.slab_panels * kNmGemmPanel, tokens);
    const int64_t slab_panels = (slab_end - s0 + kNmGemmPanel - 1) / kNmGemmPanel;
    parallel_for(slab_panels, [&](int64_t p) {
      const int64_t t0 = s0 + p * kNmGemmPanel;
      const int64_t width = std::min(kNmGemmPanel, tokens - t0);
      if (avx512) {
        nm_gemm_avx512_pack_x(args, t0, width, xt_data + p * panel_floats);
      } else {
        nm_gemm_avx2_pack_x(args, t0, width, xt_data + p * panel_floats);
      }
    });
    const int64_t groups = (slab_panels + k.group_panels - 1) / k.group_panels;
    parallel_for(k.chunks * groups, [&](int64_t i) {
      const int64_t p0 = i / k.chunks * k.group_panels;
      item(i % k.chunks, p0, s0, slab_end, xt_data + p0 * panel_floats);
    });
  }
}

}  // namespace detail
#endif

int64_t nm_gemm_scratch_bytes(const NmGemmOperand& a) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() >= Isa::kAvx2 && a.depth > 0 && a.rows > 0 && a.lane_values.size() == 0 &&
      detail::nm_gemm_depth_block_valid(a.pattern.m, a.depth_block)) {
    const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m, a.depth_block);
    const detail::NmGemmBlocking k = choose_blocking(lay, -1, max_threads());
    return (worker_floats(k, lay) + (k.own_pack ? 0 : k.slab_panels * lay.panel_floats())) *
           static_cast<int64_t>(sizeof(float));
  }
#endif
  (void)a;
  return 0;
}

namespace {

// Every check of nm_gemm's boundary (throws nms::Error naming the value).
void validate_nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                      const float* bias) {
  NMS_CHECK(x.cols() == a.depth, "nm_gemm: x has ", x.cols(), " columns, the operand's depth is ",
            a.depth);
  NMS_CHECK(y.rows() == x.rows() && y.cols() == a.rows, "nm_gemm: y is ", y.rows(), " x ", y.cols(),
            ", expected ", x.rows(), " x ", a.rows);
  NMS_CHECK(!detail::views_overlap(x, y), "nm_gemm: y overlaps x");
  if (bias != nullptr && a.rows > 0 && y.rows() > 0) {
    NMS_CHECK(!detail::views_overlap(ConstMatrixViewF(bias, 1, a.rows, a.rows), y),
              "nm_gemm: the bias lies inside y");
  }
  if (a.lane_values.size() > 0) {  // packed for the permute kernel (nm_gemm_lanes.h)
    const detail::NmGemmLaneLayout lanes(a.rows, a.depth, a.pattern.n, a.pattern.m);
    NMS_CHECK(a.lane_values.size() == lanes.total() && a.lane_index.size() == lanes.total(),
              "nm_gemm: the operand's lane form does not match its shape (use nm_gemm_pack)");
    return;
  }
  NMS_CHECK(detail::nm_gemm_depth_block_valid(a.pattern.m, a.depth_block),
            "nm_gemm: the operand is not packed (its depth block, ", a.depth_block,
            ", is none that ", a.pattern.to_string(), " is packed with; use nm_gemm_pack)");
  const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m, a.depth_block);
  NMS_CHECK(
      a.packed.size() == lay.total_floats() && a.shared.size() == lay.depth_blocks * lay.tiles,
      "nm_gemm: the operand is not packed (use nm_gemm_pack)");
}

}  // namespace

std::string nm_gemm_check(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                          const float* bias) {
  try {
    validate_nm_gemm(x, a, y, bias);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y, const float* bias) {
  validate_nm_gemm(x, a, y, bias);
  const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m, a.depth_block);
  const int64_t tokens = x.rows();
  if (a.lane_values.size() > 0) {  // packed for the permute kernel (nm_gemm_lanes.h)
    if (tokens == 0 || a.rows == 0) return;
    if (isa_active() == Isa::kAvx512) {
      detail::nm_gemm_lanes_run(x, a, y, bias);
    } else {
      detail::nm_gemm_lanes_scalar(x, a, y, bias);
    }
    return;
  }
  if (tokens == 0 || a.rows == 0) return;
#if defined(NMS_HAVE_AVX512_KERNELS)
  const Isa isa = isa_active();
  if (isa >= Isa::kAvx2 && a.depth > 0) {
    detail::NmGemmArgs args;
    args.x = x.data();
    args.ldx = x.ld();
    args.packed = a.packed.data();
    args.shared = a.shared.data();
    args.rows = a.rows;
    args.depth = a.depth;
    args.n = a.pattern.n;
    args.m = a.pattern.m;
    args.depth_block = a.depth_block;
    args.y = y.data();
    args.ldy = y.ld();
    args.bias = bias;
    args.panel_pairs = detail::nm_gemm_panel_pairs();
    detail::nm_gemm_simd(args, tokens, isa == Isa::kAvx512);
    return;
  }
#endif
  detail::parallel_for(tokens, [&](int64_t t) { row_scalar(x, a, lay, y, bias, t); });
}

}  // namespace nms
