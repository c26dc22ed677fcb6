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
inline constexpr int64_t kLanePanel = 32;  // tokens per panel of the hybrid kernel's X
// The hybrid kernel's super-tile (nm_gemm_lanes_avx512.cpp): its last kLanePanel tokens load-fed
// (read from a panel of X), the ones before permute-fed: 32 + 32 tokens where a chunk holds 8 or
// more slots, 96 + 32 where it holds fewer (1:4's 4 slots: there the 8 load-fed FMAs per slot of
// the narrow shape and its X rows loaded per chunk left the loads the limit). Only full super-tiles
// run hybrid; the tokens after the last one run on the permute-only tile.
inline constexpr int64_t lane_hybrid_tokens(int n, int m) {
  return 16 / m * n >= 8 ? 64 : 128;
}
inline constexpr int64_t kLaneHybridMaxTokens = 128;
// Tokens per work item of the hybrid kernel: a multiple of its super-tiles.
inline constexpr int64_t kLaneHybridTokenBlock = 256;

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
  float* y;  // [tokens, rows], row stride ldy; [rows, tokens] when y_transposed
  int64_t ldy;
  // rows floats, added to each element after its chain (one rounded addition, add_bias's bits) by
  // the last K block's tiles before they store; row-major Y only.
  const float* bias = nullptr;
  // Yᵀ form (nm_wgrad's dW = Yᵀ): element (token t, row r) at y[r · ldy + t], moved through a
  // 16 x 16 in-register transpose per tile at its load and store (~128 shuffles against 8192
  // permutes and FMAs of a tile at T 512, 2:4). Only in this form, with start_w set, the first K
  // block starts each element from start_lambda · start_w(r, t) where start_keep(r, t) == 0 and
  // from 0 where it is not (nm_wgrad's decay term), instead of from 0.
  bool y_transposed = false;
  const float* start_w = nullptr;  // [rows, tokens], row stride start_ldw
  int64_t start_ldw = 0;
  const uint8_t* start_keep = nullptr;  // [rows, tokens] bytes, row stride start_ldkeep
  int64_t start_ldkeep = 0;
  float start_lambda = 0.0f;
  // The hybrid kernel, given its panels (nm_wgrad's Yᵀ form; null for the permute-only kernel):
  // with S = lane_hybrid_tokens(n, m), the load-fed tokens of each full super-tile j (tokens
  // [j · S, (j + 1) · S)) in panel j, element (token (j + 1) · S − kLanePanel + i, column k) at
  // x_panels[(j · depth + k) · kLanePanel + i]; t_begin of every call a multiple of S. (Panels of
  // all tokens, with super-tiles of 128, 4 times the copying: nm_wgrad at T 8192 x 3072 -> 768
  // took 262.5 ms against 252-254, one thread, Zen 4.)
  const float* x_panels = nullptr;
  // The hybrid kernel on a row-major Y (the forward and backward-data products; x_panels null):
  // each call packs the panels of its own super-tiles from x, one K block at a time, into a
  // buffer of its thread (super-tiles counted from t_begin).
  bool hybrid_pack = false;
  // The last K block writes Y with streaming stores (whole lines, no read for ownership; y 64-byte
  // aligned and ldy a multiple of 16), for a Y larger than the caches: the hybrid kernel each
  // super-tile's rows (nm_wgrad's dW), the row-major tile its tokens' two lines when the row block
  // is whole.
  bool y_stream = false;
};

// Y for tokens [t_begin, t_end) and row blocks [b_begin, b_end) (nm_gemm_lanes_avx512.cpp): per
// K block of up to 128 chunks, per row block, per hybrid super-tile (x_panels or hybrid_pack) and
// per tile of 8 tokens after the last one; each output element is the fused multiply-add chain
// over its kept slots in order from 0 (stored to Y and reloaded between K blocks), bitwise the
// scalar path's result.
void nm_gemm_lanes_avx512(const NmGemmLaneArgs& a, int64_t t_begin, int64_t t_end, int64_t b_begin,
                          int64_t b_end);

}  // namespace nms::detail
