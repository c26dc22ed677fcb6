// AVX-512 2:4 packers of nm_gemm_pack_masked.cpp: one (depth block, tile) run of entries
// (src/kernels/nm_gemm_layout.h), and eight rows of a staged lane form (nm_gemm_lanes_layout.h:
// the same per-chunk compress, then an 8 x 8 transpose per chunk). For the entries:
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
                               int64_t col_base, int64_t width, float* run) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // lanes 2i, 2i + 1 <- value i (first source), offset i (second source, index 16 + i).
  const __m512i interleave =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m256i slot_rows = _mm256_setr_epi32(0, 6, 12, 18, 24, 30, 36, 42);
  for (int64_t c = 0; c < width; c += 16) {
    const int64_t cols = width - c < 16 ? width - c : 16;  // a multiple of 4
    const auto present = static_cast<__mmask16>(cols == 16 ? 0xFFFFu : (1u << cols) - 1u);
    const __m512i offsets = _mm512_slli_epi32(
        _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(col_base + c))), 6);
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
          pack, _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits), rows[l] + c));
      const __m512i offs = _mm512_maskz_compress_epi32(pack, offsets);
      const __m512i pairs =
          _mm512_permutex2var_epi32(_mm512_castps_si512(values), interleave, offs);
      _mm512_mask_i32scatter_epi64(dst, slots, index, pairs, 8);
    }
  }
  return true;
}

namespace {

// Transposes the 8 x 8 floats of r[0..8) in place (r[i] lane j <-> r[j] lane i).
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

}  // namespace

bool nm_gemm_pack_lanes24x8_avx512(const float* const rows[8], const uint64_t* const mask_rows[8],
                                   int64_t c_begin, int64_t c_end, int64_t depth, int64_t origin,
                                   int64_t l0, float* stage_values, int32_t* stage_lanes) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t c = c_begin; c < c_end; ++c) {
    const int64_t col = c * 16;
    const int64_t cols = depth - col < 16 ? depth - col : 16;  // a multiple of 4
    const auto present = static_cast<__mmask16>(cols == 16 ? 0xFFFFu : (1u << cols) - 1u);
    __m256 values[8];
    __m256 lanes[8];
    for (int l = 0; l < 8; ++l) {
      lanes[l] = _mm256_setzero_ps();
      if (rows[l] == nullptr) {  // a padding row: value 0, lane 0
        values[l] = _mm256_setzero_ps();
        continue;
      }
      const auto bits = static_cast<uint32_t>((mask_rows[l][col >> 6] >> (col & 63)) & present);
      uint32_t packs;
      if (!packed_columns(bits, cols, packs)) return false;
      // Unkept columns load as 0 (the padding slots' values); slots past a partial chunk's
      // groups compress to value 0, lane 0.
      const auto pack = static_cast<__mmask16>(packs);
      values[l] = _mm512_castps512_ps256(_mm512_maskz_compress_ps(
          pack, _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits), rows[l] + (col - origin))));
      if (stage_lanes != nullptr) {
        lanes[l] =
            _mm256_castsi256_ps(_mm512_castsi512_si256(_mm512_maskz_compress_epi32(pack, iota)));
      }
    }
    // Slot s of the 8 rows is then one 32-byte store (l0 is a multiple of 8).
    transpose8x8(values);
    float* v = stage_values + (c - c_begin) * 8 * 32 + l0;
    for (int s = 0; s < 8; ++s) _mm256_store_ps(v + s * 32, values[s]);
    if (stage_lanes == nullptr) continue;
    transpose8x8(lanes);
    auto* x = reinterpret_cast<float*>(stage_lanes + (c - c_begin) * 8 * 32 + l0);
    for (int s = 0; s < 8; ++s) _mm256_store_ps(x + s * 32, lanes[s]);
  }
  return true;
}

}  // namespace nms::detail
