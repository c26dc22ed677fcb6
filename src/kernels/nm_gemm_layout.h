// PRIVATE header: the blocked layout of NmGemmOperand (nm_gemm.h), shared by the packer and the
// kernels (plain data and constexpr arithmetic only: the AVX-512 unit includes it).
//
// A [R, K] N:M along K with m | 16. Rows in blocks of kNmGemmBlockRows (32, the kernel's two
// 16-lane output vectors; the last block padded with zero rows); K in chunks of 16 (the last one
// partial when 16 does not divide K). Per (block, chunk), slots_per_chunk = 16·n/m slots; per slot
// 32 values (one per row of the block) and 32 lanes (the position of that value's column inside
// the chunk, 0..15). Offset of (block b, chunk c, slot s, row l): ((b·chunks + c)·slots + s)·32 +
// l. A partial last chunk has fewer real slots; the rest hold value 0 at lane 0.
#pragma once

#include <cstdint>

namespace nms {

inline constexpr int64_t kNmGemmChunk = 16;

namespace detail {

struct NmGemmLayout {
  int64_t blocks = 0;
  int64_t chunks = 0;
  int64_t slots_per_chunk = 0;

  NmGemmLayout(int64_t rows, int64_t depth, int n, int m)
      : blocks((rows + 31) / 32),
        chunks((depth + kNmGemmChunk - 1) / kNmGemmChunk),
        slots_per_chunk(kNmGemmChunk / m * n) {}

  int64_t block_stride() const { return chunks * slots_per_chunk * 32; }
  int64_t total() const { return blocks * block_stride(); }
  int64_t offset(int64_t block, int64_t chunk, int64_t slot) const {
    return ((block * chunks + chunk) * slots_per_chunk + slot) * 32;
  }
};

}  // namespace detail
}  // namespace nms
