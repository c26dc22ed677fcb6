// AVX-512 2:4 packers of nm_gemm_pack_masked.cpp: one (depth block, tile) run of entries
// (src/kernels/nm_gemm_layout.h), and one row of a staged lane form (nm_gemm_lanes_layout.h, the
// same per-chunk compress with the values and lanes scattered 32 floats apart). For the entries:
// Per row and 16 columns (4 groups, 8 slots): one masked load, vcompressps of the kept values and
// of their panel offsets, one permute interleaving them into {value, offset} pairs, and a scatter
// of the 8 pairs to their slots (6 rows apart). The scalar packer spent ~6 cycles per entry on bit
// scans and single stores. Groups keeping fewer than 2 (Bi-Mask's backward masks) are padded as the
// scalar packer pads them; a run with a group keeping more goes back to the scalar packer, which
// reports it.
#include <immintrin.h>

#include <cstdint>

#include "kernels/nm_gemm_layout.h"
#include "kernels/nm_gemm_pack24_avx512.h"

namespace nms::detail {

namespace {

// Per group nibble: the columns it packs (its kept ones, padded with its lowest unkept ones up to
// 2, as the scalar packer pads), or 0xF for a group keeping more than 2.
constexpr uint8_t kSlots[16] = {0x3, 0x3, 0x3, 0x3, 0x5, 0x5, 0x6, 0xF,
                                0x9, 0x9, 0xA, 0xF, 0xC, 0xF, 0xF, 0xF};

// The packed columns of `cols` (a multiple of 4) mask bits, or false for a group keeping more.
inline bool packed_columns(uint32_t bits, int64_t cols, uint32_t& packs) {
  packs = 0;
  for (int64_t g = 0; g < cols; g += 4) {
    const uint32_t group = kSlots[(bits >> g) & 0xF];
    if (group == 0xF) return false;
    packs |= group << g;
  }
  return true;
}

}  // namespace

bool nm_gemm_pack_run24_avx512(const float* const rows[kNmGemmTileRows],
                               const uint64_t* const mask_rows[kNmGemmTileRows], int64_t col0,
                               int64_t width, float* run) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // lanes 2i, 2i + 1 <- value i (first source), offset i (second source, index 16 + i).
  const __m512i interleave =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m256i slot_rows = _mm256_setr_epi32(0, 6, 12, 18, 24, 30, 36, 42);
  for (int64_t c = 0; c < width; c += 16) {
    const int64_t cols = width - c < 16 ? width - c : 16;  // a multiple of 4
    const auto present = static_cast<__mmask16>(cols == 16 ? 0xFFFFu : (1u << cols) - 1u);
    const __m512i offsets =
        _mm512_slli_epi32(_mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(c))), 6);
    const int64_t slot0 = c / 2;
    for (int l = 0; l < kNmGemmTileRows; ++l) {
      auto* dst = reinterpret_cast<long long*>(run + (slot0 * kNmGemmTileRows + l) * 2);
      const __m256i index = slot_rows;
      const auto slots = static_cast<__mmask8>((1u << (cols / 2)) - 1u);
      if (rows[l] == nullptr) {  // a padding row: value 0 at offset 0
        _mm512_mask_i32scatter_epi64(dst, slots, index, _mm512_setzero_si512(), 8);
        continue;
      }
      const int64_t col = col0 + c;
      const auto bits = static_cast<uint32_t>((mask_rows[l][col >> 6] >> (col & 63)) & present);
      uint32_t packs;
      if (!packed_columns(bits, cols, packs)) return false;
      // Unkept columns load as 0: the padding slots' values.
      const auto pack = static_cast<__mmask16>(packs);
      const __m512 values = _mm512_maskz_compress_ps(
          pack, _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits), rows[l] + col));
      const __m512i offs = _mm512_maskz_compress_epi32(pack, offsets);
      const __m512i pairs =
          _mm512_permutex2var_epi32(_mm512_castps_si512(values), interleave, offs);
      _mm512_mask_i32scatter_epi64(dst, slots, index, pairs, 8);
    }
  }
  return true;
}

bool nm_gemm_pack_lanes24_avx512(const float* row, const uint64_t* mask_row, int64_t c_begin,
                                 int64_t c_end, int64_t depth, int64_t l, float* stage_values,
                                 int32_t* stage_lanes) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m256i slot_rows = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int64_t col = c * 16;
    const int64_t cols = depth - col < 16 ? depth - col : 16;  // a multiple of 4
    const auto present = static_cast<__mmask16>(cols == 16 ? 0xFFFFu : (1u << cols) - 1u);
    const auto bits = static_cast<uint32_t>((mask_row[col >> 6] >> (col & 63)) & present);
    uint32_t packs;
    if (!packed_columns(bits, cols, packs)) return false;
    // Unkept columns load as 0 (the padding slots' values); slots past a partial chunk's groups
    // compress to value 0, lane 0.
    const auto pack = static_cast<__mmask16>(packs);
    const __m512 values = _mm512_maskz_compress_ps(
        pack, _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits), row + col));
    const __m512i lanes = _mm512_maskz_compress_epi32(pack, iota);
    const int64_t at = (c - c_begin) * 8 * 32 + l;  // slot 0 of row l in this chunk
    _mm256_i32scatter_ps(stage_values + at, slot_rows, _mm512_castps512_ps256(values), 4);
    _mm256_i32scatter_epi32(stage_lanes + at, slot_rows, _mm512_castsi512_si256(lanes), 4);
  }
  return true;
}

}  // namespace nms::detail
