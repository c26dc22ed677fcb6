// nm_gemm driver: validation, ISA dispatch, threading over token blocks, and the scalar paths
// (the blocked one is the AVX-512 kernel's specification: the same fused multiply-add chain).
#include "nmsparse/kernels/nm_gemm.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/nm_gemm_avx512.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"

namespace nms {
namespace {

// Tokens per parallel work item: every item owns its rows of Y, so results do not depend on the
// thread count. 128 x K floats of X stay in L2 while the item walks all row blocks.
constexpr int64_t kTokenBlock = 128;

bool overlaps(const float* a, int64_t a_rows, int64_t a_ld, int64_t a_cols, const float* b,
              int64_t b_rows, int64_t b_ld, int64_t b_cols) {
  if (a_rows == 0 || a_cols == 0 || b_rows == 0 || b_cols == 0) return false;
  const float* a_end = a + (a_rows - 1) * a_ld + a_cols;
  const float* b_end = b + (b_rows - 1) * b_ld + b_cols;
  return a < b_end && b < a_end;
}

void rows_generic(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y, int64_t t) {
  const CompressedNm& c = a.generic;
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  const int bits = c.pattern.index_bits();
  const int64_t value_cols = c.value_cols();
  const float* xr = x.row(t);
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* v = c.values.data() + r * value_cols;
    float acc = 0.0f;
    for (int64_t s = 0; s < value_cols; ++s) {
      const int64_t col = s / n * m + (bits == 0 ? 0 : c.index_at(r, s));
      acc = std::fma(xr[col], v[s], acc);
    }
    y(t, r) = acc;
  }
}

void rows_blocked_scalar(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y, int64_t t) {
  const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  const float* xr = x.row(t);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t b = r / 32;
    const int64_t l = r % 32;
    float acc = 0.0f;
    for (int64_t c = 0; c < lay.chunks; ++c) {
      const float* v = a.values.data() + lay.offset(b, c, 0) + l;
      const uint8_t* lane = a.lanes.data() + lay.offset(b, c, 0) + l;
      for (int64_t s = 0; s < lay.slots_per_chunk; ++s) {
        acc = std::fma(xr[c * kNmGemmChunk + lane[32 * s]], v[32 * s], acc);
      }
    }
    y(t, r) = acc;
  }
}

}  // namespace

void nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y) {
  NMS_CHECK(x.cols() == a.depth, "nm_gemm: x has ", x.cols(), " columns, the operand's depth is ",
            a.depth);
  NMS_CHECK(y.rows() == x.rows() && y.cols() == a.rows, "nm_gemm: y is ", y.rows(), " x ", y.cols(),
            ", expected ", x.rows(), " x ", a.rows);
  NMS_CHECK(!overlaps(x.data(), x.rows(), x.ld(), x.cols(), y.data(), y.rows(), y.ld(), y.cols()),
            "nm_gemm: y overlaps x");
  const detail::NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m);
  NMS_CHECK(!a.blocked || (a.values.size() == lay.total() && a.lanes.size() == lay.total()),
            "nm_gemm: the operand is not packed (use nm_gemm_pack)");
  const int64_t tokens = x.rows();
  if (tokens == 0 || a.rows == 0) return;
  const Isa isa = isa_active();
#if defined(NMS_HAVE_AVX512_KERNELS)
  if (a.blocked && isa == Isa::kAvx512) {
    const detail::NmGemmArgs args{x.data(),       x.ld(),     a.depth,    a.values.data(),
                                  a.lanes.data(), lay.blocks, lay.chunks, lay.slots_per_chunk,
                                  a.rows,         y.data(),   y.ld()};
    detail::parallel_for((tokens + kTokenBlock - 1) / kTokenBlock, [&](int64_t i) {
      detail::nm_gemm_avx512_rows(args, i * kTokenBlock, std::min(tokens, (i + 1) * kTokenBlock));
    });
    return;
  }
#endif
  (void)isa;
  detail::parallel_for(tokens, [&](int64_t t) {
    if (a.blocked) {
      rows_blocked_scalar(x, a, y, t);
    } else {
      rows_generic(x, a, y, t);
    }
  });
}

}  // namespace nms
