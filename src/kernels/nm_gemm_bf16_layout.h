// PRIVATE header: the packed form of nm_gemm_bf16 (nmsparse/kernels/nm_gemm_bf16.h) and what its
// AVX-512 BF16 kernel reads: plain data and arithmetic, and the declarations shared by the
// translation units.
//
// Rows of A in blocks of 32 (the kernel's two fp32 output vectors; the last block padded with
// rows of value 0), K in chunks of 32 columns (one zmm of bf16 X; the last chunk partial when 32
// does not divide K). m divides 32, so a chunk holds 32 / m whole groups: slots_per_chunk =
// 32 / m · n slots (per group its n slots, columns increasing, as CompressedNm orders them),
// paired in order into pairs_per_chunk = ceil(slots_per_chunk / 2) pairs; an odd last slot's
// partner is padding. Entry (block b, chunk c, pair p) starts at
// ((b · chunks + c) · pairs_per_chunk + p) · 64 in both buffers: half h (rows 16h .. 16h + 15)
// at + 32h, row l of the half at words 2l (the pair's first slot) and 2l + 1 (its second): in
// `values` the bf16 values, in `index` their columns inside the chunk (0..31), so one 64-byte
// load is vpermw's index vector and one is vdpbf16ps's operand. Padding (a group that keeps
// fewer than n, an odd slot count's partner, rows past R, pairs of a partial last chunk past its
// slots): value 0, column 0.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>

#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"

namespace nms::detail {

inline constexpr int64_t kBf16Rows = 32;   // rows of A per block: 2 zmm of fp32 outputs
inline constexpr int64_t kBf16Chunk = 32;  // columns of K per chunk: one zmm of bf16

struct NmGemmBf16Layout {
  int64_t rows = 0;
  int64_t depth = 0;
  int64_t blocks = 0;
  int64_t chunks = 0;
  int64_t slots_per_chunk = 0;
  int64_t pairs_per_chunk = 0;

  NmGemmBf16Layout(int64_t r, int64_t k, int n, int m)
      : rows(r),
        depth(k),
        blocks((r + kBf16Rows - 1) / kBf16Rows),
        chunks((k + kBf16Chunk - 1) / kBf16Chunk),
        slots_per_chunk(kBf16Chunk / m * n),
        pairs_per_chunk((kBf16Chunk / m * n + 1) / 2) {}

  int64_t total() const { return blocks * chunks * pairs_per_chunk * 2 * kBf16Rows; }
  int64_t offset(int64_t block, int64_t chunk, int64_t pair) const {
    return ((block * chunks + chunk) * pairs_per_chunk + pair) * 2 * kBf16Rows;
  }
  // Word of slot `slot` (of the chunk) of row `row` (of the block) inside the chunk's entries.
  static int64_t word(int64_t slot, int64_t row) {
    return slot / 2 * 2 * kBf16Rows + row / 16 * 32 + row % 16 * 2 + slot % 2;
  }
};

// CompressedNm's canonical slots of one group (its m bits of `kept`, none over n): the kept
// columns plus, when fewer than n, the lowest columns not kept. Internal linkage (static): the
// scalar and the AVX-512 translation units each compile their own copy with their own flags.
static constexpr uint32_t canonical_slots(uint32_t kept, uint32_t group_bits, int n) {
  uint32_t slots = kept;
  for (uint32_t free = ~kept & group_bits; std::popcount(slots) < n;) {
    slots |= free & (0u - free);
    free &= free - 1;
  }
  return slots;
}

// What the AVX-512 BF16 pack reads and writes (m == 4): dense A [rows, depth] (row stride lda)
// and its mask (BitMask words, words_per_row per row) into the operand's buffers (index null:
// the values only, the index words standing from a pack of the same mask).
struct NmGemmBf16PackArgs {
  const float* a;
  int64_t lda;
  int64_t rows, depth;
  const uint64_t* mask;
  int64_t words_per_row;
  int n;
  uint16_t* values;
  uint16_t* index;
};

// Row block b of the operand, every word written; false when a group keeps more than n (the
// block is then unspecified and the caller names the group).
bool nm_gemm_bf16_pack_m4_avx512(const NmGemmBf16PackArgs& p, int64_t b);
// Chunk c of row block b only, row r's values of the chunk at stage + (r - stage_row0) · 32 (a
// transposed stage of W: the transposed packer; p.a unused).
bool nm_gemm_bf16_pack_m4_staged_avx512(const NmGemmBf16PackArgs& p, int64_t b, int64_t c,
                                        const float* stage, int64_t stage_row0);

// Throws nms::Error "<what>: pattern N:M is not supported (m must divide 32 ...)" unless
// nm_gemm_bf16_supports(p).
void check_bf16_pattern(NmPattern p, const char* what);

// dst sized and labelled for a [rows, depth] operand of pattern p, its words zero-filled when its
// layout changes and kept otherwise: writers fill every real slot and leave the padding (rows
// past `rows`, an odd slot count's partner, pairs of a partial last chunk past its slots) as it
// is, zero.
NmGemmBf16Layout nm_gemm_bf16_prepare(int64_t rows, int64_t depth, NmPattern p,
                                      NmGemmBf16Operand& dst);

// nm_gemm_bf16_pack_into without its nm_validate (for callers that checked the structure:
// nm_wgrad_bf16 packs dYᵀ each call). The pattern must be supported; any index reads as its value
// modulo 32 (no out-of-range access).
void nm_gemm_bf16_pack_compressed(const CompressedNm& compressed, NmGemmBf16Operand& dst);

// A 2:4 compression (values [rows, depth / 2], index rows of index_ld bytes, 2 bits per slot)
// for nm_gemm_bf16_pack_compressed24_avx512.
struct NmGemmBf16CompressedArgs {
  const float* values;
  int64_t values_ld;
  const uint8_t* indices;
  int64_t index_ld;
  int64_t rows, depth;
  uint16_t* dst_values;
  uint16_t* dst_index;
};

// Row block b of nm_gemm_bf16_pack_compressed's operand at 2:4, 16 rows at a time (the real rows'
// words; rows past `rows` written as 0).
void nm_gemm_bf16_pack_compressed24_avx512(const NmGemmBf16CompressedArgs& p, int64_t b);

// The work items of the kernel's drivers (nm_gemm_bf16, nm_wgrad_bf16), in parallel:
// item(t0, t1, b0, b1) for blocks of 256 tokens [t0, t1) by parts [b0, b1) of the `blocks` row
// blocks, the rows split only when the token blocks alone would leave threads idle (at least 2
// items per thread). Each item owns its block of the output: results do not depend on the split.
void nm_gemm_bf16_for_items(int64_t tokens, int64_t blocks,
                            const std::function<void(int64_t, int64_t, int64_t, int64_t)>& item);

// What the AVX-512 BF16 kernel reads (nm_gemm_bf16_avx512.cpp).
struct NmGemmBf16Args {
  const uint16_t* x;  // [tokens, depth] bf16, row stride ldx
  int64_t ldx;
  const uint16_t* values;
  const uint16_t* index;
  int64_t rows, depth;
  int n, m;
  float* y;     // [tokens, rows], row stride ldy; with y_transposed [rows, tokens]: y(t, r) at
  int64_t ldy;  // y[r * ldy + t] (the weight gradient's dW = (dWᵀ)ᵀ, nm_wgrad_bf16.h)
  bool y_transposed = false;
  // y_transposed only: write Yᵀ's lines whole with streaming stores in the last K block (a large
  // dW that the caches would not keep; needs y 64-byte aligned, ldy % 16 == 0 and the item's
  // tokens in whole pairs of tiles, else ignored). y_stage: the kernel's own.
  bool y_stream = false;
  float* y_stage = nullptr;
  // y_transposed only: the first K block starts from λ · w(r, t) where keep(r, t) == 0 and from
  // 0 elsewhere (SR-STE's decay term, NmWgradDecay), denormal starts flushed to (signed) 0 as
  // vdpbf16ps flushes its sums. start_w == nullptr: from 0.
  const float* start_w = nullptr;
  int64_t start_ldw = 0;
  const uint8_t* start_keep = nullptr;
  int64_t start_ldkeep = 0;
  float start_lambda = 0.0f;
};

// Y for tokens [t_begin, t_end) and row blocks [b_begin, b_end): per K block of up to 64 chunks,
// per row block, per tile of 8 tokens (Y stored and reloaded between K blocks).
void nm_gemm_bf16_avx512(const NmGemmBf16Args& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                         int64_t b_end);

// x [rows, cols] (row stride ldx) rounded to bf16 (vcvtne2ps2bf16: round to nearest even) into
// dst [rows, cols] (row stride cols).
void round_rows_to_bf16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                               uint16_t* dst);
// x [rows, cols] (row stride ldx) transposed and rounded the same way into dst [cols, rows] (row
// stride ld_dst): dst[j * ld_dst + i] = bf16(x[i * ldx + j]). 16 x 16 blocks through registers.
void round_transposed_to_bf16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                                     uint16_t* dst, int64_t ld_dst);

}  // namespace nms::detail
