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

}  // namespace

int64_t nm_gemm_scratch_bytes(const NmGemmOperand& a) {
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (isa_active() >= Isa::kAvx2 && a.depth > 0 && a.rows > 0) {
    const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
    return lay.scratch_floats() * static_cast<int64_t>(sizeof(float));
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
    const int64_t scratch_floats = lay.scratch_floats();
    // Work items of one 64-token panel: each owns its rows of Y, so results do not depend on the
    // thread count. (Two panels per item, sharing each tile's entries in L1, measured no faster.)
    // Scratch (Xᵀ panel + R x 64 outputs) is per thread and reused.
    detail::parallel_for((tokens + kNmGemmPanel - 1) / kNmGemmPanel, [&](int64_t i) {
      thread_local AlignedBuffer<float> scratch;
      if (scratch.size() < scratch_floats) scratch.resize_for_overwrite(scratch_floats);
      const int64_t t0 = i * kNmGemmPanel;
      const int64_t width = std::min(kNmGemmPanel, tokens - t0);
      if (isa == Isa::kAvx512) {
        detail::nm_gemm_avx512_panel(args, t0, width, scratch.data());
      } else {
        detail::nm_gemm_avx2_panel(args, t0, width, scratch.data());
      }
    });
    return;
  }
#endif
  detail::parallel_for(tokens, [&](int64_t t) { row_scalar(x, a, lay, y, t); });
}

}  // namespace nms
