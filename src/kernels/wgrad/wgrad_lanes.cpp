// The lane form of dYᵀ for nm_wgrad's permute route (wgrad_lanes.h).
#include "kernels/wgrad/wgrad_lanes.h"

#include <algorithm>

#include "core/parallel.h"
#include "kernels/nm_gemm_lanes_layout.h"
#include "kernels/wgrad/wgrad_kernels.h"
#include "nmsparse/core/error.h"

namespace nms::detail {

void wgrad_lanes_from_compressed(const CompressedNm& dy, AlignedBuffer<float>& values,
                                 AlignedBuffer<int32_t>& lanes) {
  const int n = dy.pattern.n;
  const int m = dy.pattern.m;
  NMS_CHECK(kLaneChunk % m == 0, "nm_wgrad: the permute route needs m dividing 16, got ",
            dy.pattern.to_string());
  const NmGemmLaneLayout lay(dy.cols, dy.rows, n, m);
  if (values.size() != lay.total()) {
    values.resize_for_overwrite(lay.total());
    lanes.resize_for_overwrite(lay.total());
  }
  const int64_t slots_per_row = dy.value_cols();
  const int64_t slots_total = lay.chunks * lay.slots_per_chunk;
  // Decoded per piece of 4 chunks: at most 4 · 16 = 64 slots (kWgradMaxBlockSlots), the token of
  // each slot relative to the piece's first token (a multiple of 16, so its lane is token % 16).
  constexpr int64_t kPieceChunks = 4;
  const int64_t piece_slots = kPieceChunks * lay.slots_per_chunk;
  static_assert(kPieceChunks * kLaneChunk <= kWgradMaxBlockSlots);
  int32_t group_token[kWgradMaxBlockSlots + 16] = {};
  for (int s = 0; s < kWgradMaxBlockSlots; ++s) group_token[s] = s / n * m;
#if defined(NMS_HAVE_AVX512_KERNELS)
  const WgradDecodeFn decode = wgrad_decode_avx512;
  const WgradLanePieceFn write_piece = wgrad_lane_piece_avx512;
#else
  const WgradDecodeFn decode = wgrad_decode_scalar;
  const WgradLanePieceFn write_piece = wgrad_lane_piece_scalar;
#endif

  parallel_for(lay.blocks, [&](int64_t b) {
    alignas(64) float piece_values[kLaneRows][kWgradMaxBlockSlots];
    alignas(64) int32_t piece_offsets[kLaneRows][kWgradMaxBlockSlots];
    const int64_t real = std::min<int64_t>(kLaneRows, dy.cols - b * kLaneRows);
    // Padding rows: value 0, lane 0 in every piece.
    for (int64_t l = real; l < kLaneRows; ++l) {
      std::fill(piece_values[l], piece_values[l] + kWgradMaxBlockSlots, 0.0f);
      std::fill(piece_offsets[l], piece_offsets[l] + kWgradMaxBlockSlots, 0);
    }
    float* out_values = values.data() + lay.offset(b, 0, 0);
    int32_t* out_lanes = lanes.data() + lay.offset(b, 0, 0);
    WgradDecodeArgs da{};
    da.row_bytes = dy.index_row_bytes();
    da.bits = dy.pattern.index_bits();
    da.m = m;
    da.group_token = group_token;
    for (int64_t s0 = 0; s0 < slots_per_row; s0 += piece_slots) {
      const int slots = static_cast<int>(std::min(piece_slots, slots_per_row - s0));
      for (int64_t l = 0; l < real; ++l) {
        const int64_t o = b * kLaneRows + l;
        da.values = dy.values.data() + o * slots_per_row + s0;
        da.indices = dy.indices.data() + o * da.row_bytes;
        da.s0 = s0;
        da.slots = slots;
        // The 32 rows are 32 + 32 streams of values and index bits, more than the hardware
        // prefetchers follow: the row's values and index bytes two pieces ahead are requested here.
        const int64_t ahead = s0 + 2 * piece_slots;
        if (ahead < slots_per_row) {
          const float* pv = dy.values.data() + o * slots_per_row + ahead;
          const int64_t count = std::min(piece_slots, slots_per_row - ahead);
          for (int64_t k = 0; k < count; k += 16) __builtin_prefetch(pv + k);
          __builtin_prefetch(da.indices + ahead * da.bits / 8);
        }
        NMS_CHECK(decode(da, piece_values[l], piece_offsets[l]), "nm_wgrad: dY column ", o,
                  " has an index >= m (", m, ") in tokens [", s0 / n * m, ", ",
                  (s0 + slots) / n * m, ")");
      }
      write_piece(piece_values[0], piece_offsets[0], slots, out_values + s0 * kLaneRows,
                  out_lanes + s0 * kLaneRows);
    }
    std::fill(out_values + slots_per_row * kLaneRows, out_values + slots_total * kLaneRows, 0.0f);
    std::fill(out_lanes + slots_per_row * kLaneRows, out_lanes + slots_total * kLaneRows, 0);
  });
}

}  // namespace nms::detail
