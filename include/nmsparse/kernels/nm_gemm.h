// Sparse GEMMs for the three training GEMMs of an N:M linear layer y = x Wᵀ, W [out, in], fp32:
//
//   forward          Y  [T, out] = X  [T, in]  · Wᵀ    W N:M along in      (W compressed kRows)
//   backward-data    dX [T, in]  = dY [T, out] · W     Wᵀ N:M along out    (W compressed kCols:
//                                                       a transposable mask, or Bi-Mask's
//                                                       permuted backward operand)
//   weight-gradient  dW [out, in] = dYᵀ · X            dY N:M along tokens (dY compressed kCols,
//                                                       e.g. grad_prune_compressed's MVUE output)
//
// The first two are one operation, Y = X · Aᵀ with A [R, K] N:M along K: A = W for the forward
// GEMM, A = Wᵀ for backward-data. nm_gemm computes it token-vectorised, as Yᵀ = A · Xᵀ: Xᵀ is
// packed into panels of 64 tokens, each [kc][64] per depth block of up to 128 columns (32 KB, in
// L1; 64 columns measured the same on per-row masks and 8 % slower on vector-wise ones; the AVX2
// kernel takes 64, nm_gemm_layout.h); each
// micro-tile keeps 24 zmm accumulators and, per kept slot and row, broadcasts the value and
// multiply-adds it with the vectors of the panel row its column selects (no shuffles in the inner
// loop). Panels are taken in pairs: half a 6-row tile (3 rows) x 128 tokens, 1 broadcast + 1
// offset load + 8 FMAs with memory operands per slot and row, over the first half of the block's
// slots for the whole chunk, then the second half (so both panels' active rows, 2 x 16 KB, stay
// in L1). A lone last panel takes 6 rows x 64 tokens (6 loads per 4 FMAs). The load count is the
// bound on the Xeon below: the pairs took the forward GEMM at 8192 x 768 -> 3072 from 3.4 to 3.8 G
// zmm FMAs/s. On AMD CPUs every panel takes 6 rows x 64 tokens: on Zen 4 that was 7-15 % faster
// than the pairs (16:32 and 32:64, which run this kernel there; NMSPARSE_NM_GEMM_PANELS=1|2
// overrides the choice). Output blocks [rows][64] are transposed into Y with 16 x 16 in-register
// transposes and streaming stores.
//
// Cache blocking: a work item is (row chunk of at most 384 rows of A, group of up to 8 panels =
// 512 tokens); it runs depth block → panel of the group → tile of the chunk, so the chunk's slice
// of packed A for one depth block (384 x 64 entries = 192 KB at 2:4) comes from memory once per
// group and from L2 for the group's other panels, next to the group's output blocks (8 x 384 x 64
// floats = 768 KB; L2 is 2 MB per core here). With several row chunks, Xᵀ is packed once per call
// into a shared workspace (a slab of panels, about 8 MB, at a time) read by every chunk; with one
// chunk (R <= 384) each item packs its own panels a depth block at a time, in L2. Before, each
// 64-token panel streamed the whole packed A: at 4096 -> 4096 (A 64 MB at 2:4) the kernel was
// memory-bound at 0.65-0.71x of OpenBLAS, one thread. Sizes measured (one thread, CPU time, T 512
// x 4096 -> 4096 / 8192 x 768 -> 3072 / 2048 x 1024 -> 1024; ±5 % on this shared machine): 4
// panels x 768 rows 90 / 168 / 19.6 ms, 8 x 384 80-84 / 170-173 / 19.1-20 ms, 8 x 768 77-87 /
// 172-186 / 19.5-19.9 ms, 16 x 192 81 / 179 / 20.8 ms; the per-panel kernel 133-143 / 180-200 /
// 19.6-21.5 ms. Own packing with two chunks (8192 x 3072 -> 768) measured 7 % slower than the
// shared workspace.
//
// Operand reuse: when the 6 rows of a micro-tile keep the same columns in a depth block (a
// vector-wise N:M mask with blocks of a multiple of 6 rows), the kernel loads each panel row once
// and feeds 24 FMAs from registers (10 loads per 24 FMAs instead of 30): the same results, bit
// for bit, from a dense micro-kernel over the shared columns.
//
// Measured on this machine (Sapphire-Rapids-class Xeon VM, one thread; bench/bench_port_mix.cpp,
// bench/bench_nm_gemm.cpp, `nmsparse bench kernels`): a zmm FMA fed by its own L1 load runs at
// 4.8-5.8 G/s against 7.5 G/s from registers, and mixing in permute-fed FMAs does not help (a zmm
// permute and a zmm FMA share port 5). Dense OpenBLAS sgemm reuses every loaded vector over many
// FMAs and reaches ~6.2 G FMAs/s, so per-row 2:4 in fp32 cannot exceed about 2 x 4.8 / 6.2 = 1.55x
// here; the pair kernel's own ceiling is 4.8 x 8 / 10 = 3.9 G/s and the forward GEMM runs at
// 3.8 G/s. Whole GEMMs at 2:4: 1.15-1.25x forward and 1.17-1.31x backward-data (T 8192 x 768 ->
// 3072, 8192 x 3072 -> 768, 2048^3, 512 x 4096 -> 4096), 2.2x forward at 1:4; with a vector-wise
// mask of 48-row blocks (the reuse path) 1.69-1.77x at 2:4 and 2.9-3.05x at 1:4. The
// output-vectorised kernel of research/kernels.md (permute X by stored lane indices, 1.52x on
// Zen 4) ran at 0.87x here.
//
// Two AVX-512 micro-kernels (NmGemmKernel): `broadcast`, the token-vectorised kernel above, and
// `permute`, the output-vectorised kernel of research/kernels.md
// (src/kernels/nm_gemm_lanes_layout.h: lanes = 16 rows of A, X read row-major, each kept value's X
// brought to its lane by vpermps on a stored lane index; m must divide 16). Which one suits a CPU
// is a matter of its ports: on the Xeon above the permute kernel ran at 0.87x of OpenBLAS; on Zen 4
// (AMD EPYC VM, one thread, 2:4) at 1.34-1.48x where the broadcast kernel ran at 1.11-1.28x
// (`nmsparse bench kernels`). The default is permute on AMD CPUs and broadcast elsewhere;
// NMSPARSE_NM_GEMM=broadcast|permute or set_nm_gemm_kernel() override it. An operand is packed for
// the kernel and level active when it is packed: in one form only, the lane form for permute (when
// m divides 16 and no tile keeps the same columns in all its rows: those take the broadcast
// kernel's reuse path), the entries otherwise. Each form has its scalar path for lower levels, with
// the same results.
//
// Results: every output element is the chain of fused multiply-adds over its kept products in
// increasing column order, starting from 0, at every ISA level (isa.h) and any thread count, so
// results are bitwise identical across levels and thread counts. Validation happens here, at the
// API boundary (shapes, strides, patterns, aliasing); the micro-kernels do none. Errors throw
// nms::Error naming the offending value.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

// A [R, K] N:M along K, packed for nm_gemm. Opaque apart from its shape.
struct NmGemmOperand {
  int64_t rows = 0;   // R: output features of the GEMM
  int64_t depth = 0;  // K: reduction length
  NmPattern pattern;
  // Columns of K per depth block, set by the packers for the ISA level active when packing (128,
  // or 64 at the AVX2 level; a multiple of m). Results do not depend on it.
  int64_t depth_block = 0;
  // Per tile of 6 rows, per kept slot, per row: {value, panel offset}
  // (src/kernels/nm_gemm_layout.h). Empty when the operand has the lane form.
  AlignedBuffer<float> packed;
  // Per depth block and tile: 1 when the tile's rows keep the same columns in that block (e.g. a
  // vector-wise mask, nmsparse/mask/vectorwise.h): the kernel then loads each panel row once for
  // all 6 rows instead of once per row.
  AlignedBuffer<uint8_t> shared;
  // The permute kernel's form (src/kernels/nm_gemm_lanes_layout.h): per block of 32 rows, per
  // kept slot, 32 values and 32 in-chunk column indices. Empty when the operand has the entries.
  AlignedBuffer<float> lane_values;
  AlignedBuffer<int32_t> lane_index;
  // The mask the lane form was packed from by nm_gemm_pack_masked_into or
  // nm_gemm_pack_masked_transposed_into (its mask_t); empty otherwise. Lane indices depend on the
  // mask alone, so a later pack from an equal mask (a transposable layer's held mask, step after
  // step) rewrites the values only.
  BitMask lane_mask;
};

// The AVX-512 micro-kernel of nm_gemm (see above).
enum class NmGemmKernel { kBroadcast, kPermute };
// "broadcast" / "permute", and back (nullopt for anything else).
std::string_view nm_gemm_kernel_name(NmGemmKernel kernel);
std::optional<NmGemmKernel> nm_gemm_kernel_from_name(std::string_view name);
// set_nm_gemm_kernel()'s value if set, else NMSPARSE_NM_GEMM if set (throws nms::Error naming
// any other value), else permute on AMD CPUs and broadcast on others.
NmGemmKernel nm_gemm_kernel_active();
// The kernel operands packed now run on: nm_gemm_kernel_active() at the AVX-512 level, the
// broadcast scheme below it (the permute kernel is AVX-512 only).
NmGemmKernel nm_gemm_kernel_in_use();
// Overrides the kernel for the whole process (tests, benchmarks); nullopt returns to the default.
void set_nm_gemm_kernel(std::optional<NmGemmKernel> kernel);
// Sets the kernel for a scope and restores the previous override on exit.
class ScopedNmGemmKernel {
 public:
  explicit ScopedNmGemmKernel(NmGemmKernel kernel);
  ~ScopedNmGemmKernel();
  ScopedNmGemmKernel(const ScopedNmGemmKernel&) = delete;
  ScopedNmGemmKernel& operator=(const ScopedNmGemmKernel&) = delete;

 private:
  std::optional<NmGemmKernel> previous_;
};

// A = W for a kRows compression of W, A = Wᵀ for a kCols compression (any valid pattern).
// O(R · K · n/m); the per-step cost of a changing mask.
NmGemmOperand nm_gemm_pack(const CompressedNm& compressed);
// The same into `dst`, reusing its buffer when the size fits (no allocation per step).
void nm_gemm_pack_into(const CompressedNm& compressed, NmGemmOperand& dst);

// The same operand straight from dense A [R, K] (any ld) and an N:M mask along K, without the
// compressed intermediate: nm_gemm_pack(nm_compress_masked(a, mask, pattern)) entry for entry,
// in one pass (the training layers' per-step packing of W and (P W)ᵀ). Throws when a group keeps
// more than n, naming it (dst is then unspecified). When dst holds the lane form packed from an
// equal mask (NmGemmOperand::lane_mask; the comparison reads the 2 MB of a 4096 x 4096 mask), only
// the values are rewritten: 10.0 -> 7.8 ms at 4096 x 4096 2:4, one thread, Zen 4.
void nm_gemm_pack_masked_into(ConstMatrixViewF a, const BitMask& mask, NmPattern pattern,
                              NmGemmOperand& dst);

// The same for A = (P W)ᵀ [C, K], A[j][k] = w[order[k]][j] with w [R, C] (any ld; order empty:
// the identity, K = R; otherwise K = order.size(), every entry in [0, R), checked) and mask_t its
// mask along k ([C, K]; transpose_mask of P W's mask): entry for entry transpose_into followed by
// nm_gemm_pack_masked_into, without a transposed copy: blocks of W are transposed through
// registers into a 64 KB stage (16 rows of W by up to 1024 columns) and packed from it, in either
// form (the backward-data operand of a transposable or Bi-Mask layer each step).
void nm_gemm_pack_masked_transposed_into(ConstMatrixViewF w, std::span<const int64_t> order,
                                         const BitMask& mask_t, NmPattern pattern,
                                         NmGemmOperand& dst);

// Y = X · Aᵀ (+ bias): x [T, K] (any ld >= K), y [T, R] (any ld >= R; overwritten). The address
// ranges x and y span must not overlap (checked; views into the same rows of one buffer are
// refused). bias (optional, R floats, not inside y's range): each work item adds it to the block
// of Y it has just written, while the block is in cache: y(t, r) = product + bias[r], one rounded
// addition, the same bits as adding it afterwards. (A separate pass over Y took 7.3 ms of a
// vision-transformer step, 44 M outputs; bench_train_step --model vit, one thread, Zen 4.)
void nm_gemm(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
             const float* bias = nullptr);

// Whether nm_gemm(x, a, y, bias) would run: empty when it would, otherwise the message of the
// nms::Error it would throw (the same checks, nothing computed).
std::string nm_gemm_check(ConstMatrixViewF x, const NmGemmOperand& a, MatrixViewF y,
                          const float* bias = nullptr);

// Scratch nm_gemm keeps for this operand at the active ISA level and thread count, at its largest
// (T of a slab or more; 0 on the scalar path): each worker thread's output blocks (a group of
// panels x a row chunk x 64 floats, under 1 MB; plus its own Xᵀ panels of one depth block, 256 KB,
// when R <= 384) plus, when A has several row chunks, the calling thread's Xᵀ workspace (one slab
// of packed panels: about 8 MB, or a group per thread when K > 4096). Allocated on first use and
// reused by later calls on the same thread.
int64_t nm_gemm_scratch_bytes(const NmGemmOperand& a);

}  // namespace nms
