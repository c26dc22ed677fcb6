// PRIVATE header: the AVX-512 MVUE kernels (mvue_avx512.cpp, a translation unit of its own
// built with AVX-512 flags; callers check isa_active() == Isa::kAvx512 first).
//
// They perform the float operations of detail::prune_group for 2:4 MVUE (group.cpp) in the same
// order, 16 groups per vector, so results are bit-identical to it; the random word of group gid
// is word gid % 4 of Philox4x32-10 block gid / 4 (CounterRng::word). Philox runs on 16 blocks at
// once (64 groups per call). Neither kernel validates shapes: the driver (prune.cpp) does.
//
// Throughput, 8192 x 3072 fp32 gradient, one thread, Zen 4 (bench_grad --benchmark_min_time=1,
// 2026-12-06): compressed output 14.1 ms along rows and 18.4 ms along columns, dense output 13.9
// and 18.5 ms; a memcpy of the matrix takes 7.0 ms, the SSE2 kernels 1.3-4.1x longer. The lane
// form (mvue24_lanes_avx512) of the same gradient: 15.9 ms.
#pragma once

#include <cstdint>

namespace nms::detail {

struct Mvue24Key {
  uint32_t seed_lo, seed_hi, stream_lo, stream_hi;
};

// Groups along rows: `groups` consecutive groups of 4 floats at src (groups % 16 == 0), with
// group ids gid0, gid0 + 1, ... (gid0 % 4 == 0). Dense: writes 4 * groups floats to `dense`.
// Compressed (dense == nullptr): writes 2 * groups values and groups / 2 index bytes (group i's
// canonical code idx0 | idx1 << 2 in the low nibble of byte i / 2 for even i, the high nibble for
// odd i). Returns false when an input is NaN / Inf or a group's magnitude sum overflows (outputs
// unspecified then).
bool mvue24_rows_avx512(const float* src, int64_t groups, uint64_t gid0, const Mvue24Key& key,
                        float* dense, float* values, uint8_t* indices);

// Groups along columns, for 16 * blocks columns starting at src (blocks <= kColsMaxBlocks): group
// kk is rows 4kk .. 4kk + 3 (row stride ld floats) of each column, kk in [0, group_rows); column l
// has id (row0 + kk) * cols + col0 + l (cols % 4 == 0, col0 % 4 == 0; row0 % 8 == 0: src, dense,
// values and indices then point at group row row0 of a larger matrix, whose index bytes are
// not shared with the rows before it). Dense: writes the same positions of
// `dense` (row stride dense_ld). Compressed (dense == nullptr): column l's values go to
// values + l * value_ld (2 per group, group kk at 2 kk) and its index nibbles to
// indices + l * index_ld (group kk in byte kk / 2, low nibble for even kk). Returns false as above.
constexpr int64_t kColsMaxBlocks = 32;  // blocks per mvue24_cols_avx512 call (512 columns)
bool mvue24_cols_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                        int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                        float* dense, int64_t dense_ld, float* values, int64_t value_ld,
                        uint8_t* indices, int64_t index_ld);

// The same groups as mvue24_cols_avx512 (group_rows % 4 == 0, row0 % 4 == 0, col0 % 16 == 0),
// written as nm_wgrad's lane form of dYᵀ (the permute kernel's operand, 2:4: 8 slots per 16-token
// chunk, rows in blocks of 32): entry (row block b, chunk c, slot s, lane l) at ((b · chunks + c)
// · 8 + s) · 32 + l of `values` / `lanes` (64-byte aligned), for column 32b + l and the tokens of
// chunk c; slot 2j + i is kept value i of group 4c + j (canonical: kCode24's positions, +0.0
// padding) and its lane that value's token inside the chunk, 4j + index. The values and indices
// are bitwise those of the compressed output, rearranged. Streamed stores. Returns false as above.
bool mvue24_lanes_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                         int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                         int64_t chunks, float* values, int32_t* lanes);

// The same groups written as nm_gemm_bf16's operand of dYᵀ (2:4: rows in blocks of 32, tokens in
// chunks of 32, 8 pairs per chunk; nm_gemm_bf16_layout.h): group j of 16-token chunk k is pair
// (k % 2) · 4 + j of 32-token chunk k / 2, entry (row block b, chunk C, pair p) at ((b · chunks32
// + C) · 8 + p) · 64, lanes of column 32b + l at words 2l (the first kept value, bf16, or its
// token inside the chunk) and 2l + 1 (the second), half l / 16 at + 32. The values rounded as
// vcvtneps2bf16 does (nearest even, denormals to signed zero). Streamed stores. Returns false as
// above.
bool mvue24_pairs_bf16_avx512(const float* src, int64_t ld, int64_t group_rows, int64_t blocks,
                              int64_t cols, int64_t row0, int64_t col0, const Mvue24Key& key,
                              int64_t chunks32, uint16_t* values, uint16_t* index);

}  // namespace nms::detail

namespace nms::detail {

// Any n:m MVUE (m <= 64), groups along columns: the operations of mvue_group (group.cpp) for 16
// columns at a time (water-filling caps and systematic sampling with per-lane masks), bitwise its
// results. Same arguments and column/id conventions as mvue24_cols_avx512; compressed output
// writes n values and n `bits`-wide in-group indices per group (canonical fill; the index rows
// must be zeroed beforehand). Returns false on NaN / Inf input or an overflowing magnitude sum.
bool mvue_cols_avx512(const float* src, int64_t ld, int n, int m, int64_t group_rows,
                      int64_t blocks, int64_t cols, int64_t col0, const Mvue24Key& key,
                      float* dense, int64_t dense_ld, float* values, int64_t value_ld,
                      uint8_t* indices, int64_t index_ld, int bits);

// The same groups (m divides 16; src at group row row0 of the matrix, group ids from there as in
// mvue24_lanes_avx512; group_rows and row0 whole 16-token chunks) written as nm_wgrad's lane form
// of dYᵀ: entry (row block b, chunk c, slot s, lane l) at ((b · chunks + c) · 16 / m · n + s) · 32
// + l, for column 32b + l; slot j · n + i is kept value i of group j of the chunk (canonical, as
// the compressed form keeps them: its nonzero results, then its lowest positions, in order) and its
// lane that value's token inside the chunk, j · m + position. Bitwise the compressed output's
// values and indices, rearranged. Streamed stores. Returns false as mvue_cols_avx512 does.
bool mvue_lanes_avx512(const float* src, int64_t ld, int n, int m, int64_t group_rows,
                       int64_t blocks, int64_t cols, int64_t row0, int64_t col0,
                       const Mvue24Key& key, int64_t chunks, float* values, int32_t* lanes);

}  // namespace nms::detail
