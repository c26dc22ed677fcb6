// PRIVATE header: the packed form of nm_gemm_bf16 (nmsparse/kernels/nm_gemm_bf16.h) and what its
// AVX-512 BF16 kernel reads. Plain data and arithmetic only.
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
static inline uint32_t canonical_slots(uint32_t kept, uint32_t group_bits, int n) {
  uint32_t slots = kept;
  for (uint32_t free = ~kept & group_bits; std::popcount(slots) < n;) {
    slots |= free & (0u - free);
    free &= free - 1;
  }
  return slots;
}

// What the AVX-512 BF16 pack reads and writes (m == 4): dense A [rows, depth] (row stride lda)
// and its mask (BitMask words, words_per_row per row) into the operand's buffers.
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

// What the AVX-512 BF16 kernel reads (nm_gemm_bf16_avx512.cpp).
struct NmGemmBf16Args {
  const uint16_t* x;  // [tokens, depth] bf16, row stride ldx
  int64_t ldx;
  const uint16_t* values;
  const uint16_t* index;
  int64_t rows, depth;
  int n, m;
  float* y;  // [tokens, rows], row stride ldy
  int64_t ldy;
};

// Y for tokens [t_begin, t_end) and row blocks [b_begin, b_end): per K block of up to 64 chunks,
// per row block, per tile of 8 tokens (Y stored and reloaded between K blocks).
void nm_gemm_bf16_avx512(const NmGemmBf16Args& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                         int64_t b_end);

// x [rows, cols] (row stride ldx) rounded to bf16 (vcvtne2ps2bf16: round to nearest even) into
// dst [rows, cols] (row stride cols).
void round_rows_to_bf16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                               uint16_t* dst);

}  // namespace nms::detail
