// PRIVATE header: the permute form of nm_gemm (nm_gemm.h, NmGemmKernel::kPermute): when an
// operand gets it, its scalar path and the threaded driver of the AVX-512 kernel. The layout is in
// nm_gemm_lanes_layout.h.
#pragma once

#include "kernels/nm_gemm_lanes_layout.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"

namespace nms {
struct NmGemmOperand;
struct CompressedNm;

namespace detail {

// Whether an operand of this pattern packed now gets the lane form: the active level is AVX-512,
// the active kernel (nm_gemm_kernel_active) is kPermute and m divides 16. The packers then also
// check that no tile keeps the same columns in all its rows (a vector-wise mask, which the
// broadcast kernel's reuse path serves), and give the operand the lane form only: its packed
// entries and `shared` flags empty.
bool nm_gemm_lanes_for(NmPattern pattern);

// nm_gemm_pack_into's lane form: from a's packed entries (a second pass; the compressed route is
// not the training layers' per-step one) when nm_gemm_lanes_for(a.pattern) and no tile of 2 or
// more real rows is marked shared; then a.packed and a.shared are emptied. Otherwise the lane
// buffers are emptied.
void nm_gemm_lanes_from_entries(NmGemmOperand& a);

// nm_gemm_pack_into without the lane form (nm_wgrad's operand, read by nm_gemm_simd only).
void nm_gemm_pack_entries_into(const CompressedNm& compressed, NmGemmOperand& dst);

// The lane form's scalar path (any level below AVX-512): each output the fused multiply-add chain
// over its row's slots in order from 0, as the permute kernel computes it.
void nm_gemm_lanes_scalar(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                          const float* bias);

// Y = X · Aᵀ on the permute kernel (an operand with the lane form, at the AVX-512 level):
// work items of 256 tokens x a range of row blocks, over max_threads() threads, their full
// super-tiles hybrid (NmGemmLaneArgs::hybrid_pack) unless set_nm_gemm_lanes_hybrid_override or
// NMSPARSE_NM_GEMM_HYBRID=0 says otherwise. A Y of 64 MiB or more (64-byte aligned, ld a multiple
// of 16) is written with streaming stores (NmGemmLaneArgs::y_stream); the bias is added by the
// kernel's tiles.
void nm_gemm_lanes_run(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                       const float* bias);
// Tests: 1 streams every aligned Y in nm_gemm_lanes_run(x, a, y, bias), 0 none, -1 by size.
void set_nm_gemm_lanes_stream_y_override(int stream);
// Tests: 1 runs nm_gemm_lanes_run(x, a, y, bias) on hybrid super-tiles, 0 on permute-only tiles,
// -1 as NMSPARSE_NM_GEMM_HYBRID says (default: hybrid).
void set_nm_gemm_lanes_hybrid_override(int hybrid);
// The same driver on prepared arguments (the Yᵀ form of nm_wgrad); `tokens` rows of args.x.
void nm_gemm_lanes_run(const NmGemmLaneArgs& args, int64_t tokens);

}  // namespace detail
}  // namespace nms
