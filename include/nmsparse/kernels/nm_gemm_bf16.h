// N:M GEMM with bf16 inputs and fp32 accumulation: Y [T, R] = X [T, K] · Aᵀ, X bf16, A [R, K]
// N:M along K with bf16 values, Y fp32. The forward GEMM (A = W) or backward-data (A = Wᵀ) of
// nm_gemm.h with the operands rounded to bf16 (round to nearest even, core/half.h).
//
// Kernel (AVX-512 with the BF16 extension: Zen 4, Sapphire Rapids, Cooper Lake): the permute
// kernel of nm_gemm.h, two kept slots per lane. Lanes are 16 rows of A; X is read row-major, 32
// columns (one zmm of bf16) per chunk; per pair of a row's kept slots, one vpermw brings the two
// slots' X values next to each other in the row's 32-bit lane and one vdpbf16ps adds both
// products to the row's fp32 accumulator. The fp32 kernel needs one vpermps + one FMA per kept
// slot; here one vpermw + one vdpbf16ps serve two, at the same instruction rate on Zen 4
// (bench_port_mix, one thread: 2.66 G pairs/s against 2.68 G/s for vpermps + FMA), so the kept
// products per second double. Padding slots (a row keeping fewer than n in a group, or an
// odd slot count in a chunk) hold value 0.
//
// Arithmetic: products of two bf16 values are exact in fp32; each output is the fp32 sum of its
// kept products as vdpbf16ps specifies it: per pair of slots, the second slot's product added
// first, then the first's, each addition rounded to nearest even, denormal inputs read as 0 and
// denormal sums flushed to 0. Results therefore differ from nm_gemm's fp32 chains on the same
// (rounded) values. Bound (tests/kernels/nm_gemm_bf16_test.cpp): |y − Σ x̂ ŵ| <= γ_s Σ |x̂ ŵ|,
// γ_s = s u / (1 − s u), u = 2⁻²⁴, with x̂, ŵ the bf16 inputs and s the row's slot count.
// Padding multiplies 0 by some X value of its chunk, so an Inf in X can come out as NaN (as in
// nm_gemm).
//
// Below AVX-512 BF16 (or with NMSPARSE_ISA below avx512) a scalar path computes the same
// additions in the same order: the same bits (the tests compare them on every edge case; Zen 4's
// vdpbf16ps matches).
// Validation at the boundary (shapes, strides, pattern, aliasing) throws nms::Error naming the
// value; the micro-kernel does none. Threads: OpenMP over blocks of 256 tokens × row blocks,
// each output written by one thread (results independent of the thread count).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/bit_mask.h"
#include "nmsparse/core/matrix_view.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"

namespace nms {

// A [R, K] N:M along K, bf16, packed for nm_gemm_bf16 (src/kernels/nm_gemm_bf16_layout.h): per
// block of 32 rows, per chunk of 32 columns, per pair of kept slots, 32 rows x 2 bf16 values and
// their columns inside the chunk (0..31) as 16-bit permute indices.
struct NmGemmBf16Operand {
  int64_t rows = 0;   // R
  int64_t depth = 0;  // K
  NmPattern pattern;
  AlignedBuffer<uint16_t> values;
  AlignedBuffer<uint16_t> index;
  // The mask the index words were packed from by nm_gemm_bf16_pack_masked_into or
  // nm_gemm_bf16_pack_masked_transposed_into (its mask_t); empty otherwise. The index words depend
  // on the mask alone, so a later pack from an equal mask (a transposable layer's held mask) writes
  // the values only.
  BitMask index_mask;
};

// Whether nm_gemm_bf16 takes this pattern: m divides 32 (1:2 ... 16:32, any n <= m).
bool nm_gemm_bf16_supports(NmPattern pattern);
// Whether this CPU runs the AVX-512 BF16 kernel now (else the scalar path runs): the active ISA
// level (isa.h) is avx512 and the CPU has AVX512_BF16.
bool nm_gemm_bf16_kernel_active();

// A = W for a kRows compression of W, A = Wᵀ for a kCols compression; values rounded to bf16.
// Throws when nm_gemm_bf16_supports(pattern) is false. O(R · K · n/m).
NmGemmBf16Operand nm_gemm_bf16_pack(const CompressedNm& compressed);
// The same into dst, reusing its buffers when the size fits.
void nm_gemm_bf16_pack_into(const CompressedNm& compressed, NmGemmBf16Operand& dst);

// The same operand straight from dense A [R, K] (fp32, any ld) and an N:M mask along K, in one
// pass without the compressed intermediate: nm_gemm_bf16_pack(nm_compress_masked(a, mask,
// pattern)) word for word (a training layer's per-step packing of W). At m = 4 on the AVX-512
// BF16 level each row's chunk is compressed in registers and 16 rows' pairs transposed at a time
// (4096 x 4096 at 2:4: 8.4 ms, one thread, Zen 4); other patterns go group by group. A pack from
// the mask dst's index words came from (index_mask) writes the values only. Throws when a group
// keeps more than n, naming it.
void nm_gemm_bf16_pack_masked_into(ConstMatrixViewF a, const BitMask& mask, NmPattern pattern,
                                   NmGemmBf16Operand& dst);

// The same for A = (P W)ᵀ [C, K], A[j][k] = w[order[k]][j] with w [R, C] (order empty: the
// identity, K = R; every entry in [0, R), checked) and mask_t its mask along k ([C, K]): word for
// word nm_gemm_bf16_pack_masked_into on the transposed matrix (the backward-data operand each
// step). At m = 4 on the AVX-512 BF16 level, blocks of 32 rows of W are transposed through a
// 64 KB stage and packed from it (4096 x 4096, 2:4: 13.0 ms, one thread, Zen 4); otherwise
// through a transposed copy of W (transpose_into) that the calling thread keeps.
void nm_gemm_bf16_pack_masked_transposed_into(ConstMatrixViewF w, std::span<const int64_t> order,
                                              const BitMask& mask_t, NmPattern pattern,
                                              NmGemmBf16Operand& dst);

// Y = X · Aᵀ (+ bias): x [T, K] bf16 bit patterns (any ld >= K), y [T, R] fp32 (any ld >= R;
// overwritten). The address ranges of x and y must not overlap (checked). bias (optional, R
// floats): added by each work item to the block of Y it has just written, y(t, r) = product +
// bias[r] (one rounded addition, as nm_gemm does).
void nm_gemm_bf16(MatrixView<const uint16_t> x, const NmGemmBf16Operand& a, MatrixViewF y,
                  const float* bias = nullptr);
// The same with fp32 X: each work item rounds its 256 rows to bf16 once (vcvtne2ps2bf16, round to
// nearest even as f32_to_bf16) into a per-thread buffer that stays in cache: bit for bit the call
// above on a converted copy of X, without the copy's pass over memory (LibTorch's conversion of
// the 44 M activations and gradients of a vision-transformer step took 16 ms).
void nm_gemm_bf16(ConstMatrixViewF x, const NmGemmBf16Operand& a, MatrixViewF y,
                  const float* bias = nullptr);

// Empty when nm_gemm_bf16(x, a, y, bias) would run, else the message of the error it would throw.
std::string nm_gemm_bf16_check(MatrixView<const uint16_t> x, const NmGemmBf16Operand& a,
                               MatrixViewF y);
std::string nm_gemm_bf16_check(ConstMatrixViewF x, const NmGemmBf16Operand& a, MatrixViewF y);

}  // namespace nms
