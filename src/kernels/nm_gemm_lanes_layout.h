// PRIVATE header: the permute ("lanes") form of nm_gemm (nm_gemm.h, NmGemmKernel::kPermute):
// output-vectorised, lanes = 16 consecutive rows of A (output features of Y), X read row-major
// without packing, each kept slot's X value brought to its lane by a vpermps on the stored lane
// index. Plain data and arithmetic only: the AVX-512 unit includes it (nm_gemm_lanes.h has the
// driver's functions).
//
// Layout of NmGemmOperand::lane_values / lane_index: rows of A in blocks of 32 (the kernel's two
// output vectors; the last block padded with rows of value 0, lane 0), K in chunks of 16 (the
// last one partial when 16 does not divide K). m divides 16, so a chunk holds 16 / m whole groups
// and slots_per_chunk = 16 / m · n slots; slot s of chunk c is slot c · slots_per_chunk + s of
// the row (the same order as the packed entries: per group its n slots, columns increasing).
// Entry (block b, chunk c, slot s, row l) at ((b · chunks + c) · slots_per_chunk + s) · 32 + l:
// the value, and its column's position inside the chunk (0..15) as an int32 (the permute's index
// vector is then one 64-byte load: 8-bit lanes widened with vpmovzxbd measured 1.22-1.30x of
// OpenBLAS at 2:4 against 1.36-1.45x for int32, one thread, Zen 4, in a standalone copy). Slots of
// a partial last chunk past its groups hold value 0, lane 0, and are never read.
#pragma once

#include <cstdint>

namespace nms::detail {

inline constexpr int64_t kLaneRows = 32;   // rows of A per block: 2 zmm of outputs
inline constexpr int64_t kLaneChunk = 16;  // columns of K per chunk: one zmm of X

struct NmGemmLaneLayout {
  int64_t rows = 0;
  int64_t depth = 0;
  int64_t blocks = 0;
  int64_t chunks = 0;
  int64_t slots_per_chunk = 0;

  NmGemmLaneLayout(int64_t r, int64_t k, int n, int m)
      : rows(r),
        depth(k),
        blocks((r + kLaneRows - 1) / kLaneRows),
        chunks((k + kLaneChunk - 1) / kLaneChunk),
        slots_per_chunk(kLaneChunk / m * n) {}

  int64_t total() const { return blocks * chunks * slots_per_chunk * kLaneRows; }
  int64_t offset(int64_t block, int64_t chunk, int64_t slot) const {
    return ((block * chunks + chunk) * slots_per_chunk + slot) * kLaneRows;
  }
};

// What the permute kernel reads (nm_gemm_lanes_avx512.cpp).
struct NmGemmLaneArgs {
  const float* x;  // [tokens, depth], row stride ldx
  int64_t ldx;
  const float* values;
  const int32_t* lanes;
  int64_t rows, depth;
  int n, m;
  float* y;  // [tokens, rows], row stride ldy
  int64_t ldy;
};

// Y for tokens [t_begin, t_end) and row blocks [b_begin, b_end) (nm_gemm_lanes_avx512.cpp): per
// K block of up to 128 chunks, per row block, per tile of 8 tokens; each output element is the
// fused multiply-add chain over its kept slots in order from 0 (stored to Y and reloaded between
// K blocks), bitwise the scalar path's result.
void nm_gemm_lanes_avx512(const NmGemmLaneArgs& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                          int64_t b_end);

}  // namespace nms::detail
