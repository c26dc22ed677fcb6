// nm_gemm_pack: compressed N:M matrix -> the blocked operand of nm_gemm (see nm_gemm_layout.h).
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {
namespace {

// In-group index of slot `slot` from an index row (bits per index `bits` <= 8, LSB first).
inline int read_index(const uint8_t* row, int64_t row_bytes, int64_t slot, int bits) {
  const int64_t bit = slot * bits;
  const int64_t byte = bit >> 3;
  unsigned word = row[byte];
  if (byte + 1 < row_bytes) word |= static_cast<unsigned>(row[byte + 1]) << 8;
  return static_cast<int>((word >> (bit & 7)) & ((1u << bits) - 1u));
}

}  // namespace

bool nm_gemm_has_fast_path(NmPattern pattern) {
  pattern.validate();
  return kNmGemmChunk % pattern.m == 0;
}

void nm_gemm_pack_into(const CompressedNm& c, NmGemmOperand& dst) {
  c.pattern.validate();
  const int64_t r_count = c.value_rows();
  const int64_t k = c.axis_length();
  NMS_CHECK(k % c.pattern.m == 0, "nm_gemm_pack: m (", c.pattern.m,
            ") does not divide the grouped axis (", k, ")");
  NMS_CHECK(c.values.size() == r_count * c.value_cols() && c.indices.size() == c.index_bytes(),
            "nm_gemm_pack: compressed buffers hold ", c.values.size(), " values and ",
            c.indices.size(), " index bytes; the shape needs ", r_count * c.value_cols(), " and ",
            c.index_bytes());
  dst.rows = r_count;
  dst.depth = k;
  dst.pattern = c.pattern;
  dst.blocked = nm_gemm_has_fast_path(c.pattern);
  if (!dst.blocked) {  // generic path: the compressed form itself
    dst.generic.rows = c.rows;
    dst.generic.cols = c.cols;
    dst.generic.pattern = c.pattern;
    dst.generic.axis = c.axis;
    dst.generic.values.resize_for_overwrite(c.values.size());
    dst.generic.indices.resize_for_overwrite(c.indices.size());
    if (c.values.size() > 0) {
      std::memcpy(dst.generic.values.data(), c.values.data(),
                  sizeof(float) * static_cast<size_t>(c.values.size()));
    }
    if (c.indices.size() > 0) {
      std::memcpy(dst.generic.indices.data(), c.indices.data(),
                  static_cast<size_t>(c.indices.size()));
    }
    return;
  }
  const detail::NmGemmLayout lay(r_count, k, c.pattern.n, c.pattern.m);
  if (dst.values.size() != lay.total()) dst.values.resize_for_overwrite(lay.total());
  if (dst.lanes.size() != lay.total()) dst.lanes.resize_for_overwrite(lay.total());
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  const int bits = c.pattern.index_bits();
  const int64_t value_cols = c.value_cols();
  const int64_t row_bytes = c.index_row_bytes();
  const int64_t groups_per_chunk = kNmGemmChunk / m;
  detail::parallel_for(lay.blocks, [&](int64_t b) {
    float* vals = dst.values.data() + b * lay.block_stride();
    uint8_t* lanes = dst.lanes.data() + b * lay.block_stride();
    // Padding (rows past R, slots past the end of a partial last chunk): value 0, lane 0.
    std::fill(vals, vals + lay.block_stride(), 0.0f);
    std::memset(lanes, 0, static_cast<size_t>(lay.block_stride()));
    const int64_t r_end = std::min(r_count, (b + 1) * kNmGemmBlockRows);
    for (int64_t r = b * kNmGemmBlockRows; r < r_end; ++r) {
      const int64_t lane_row = r - b * kNmGemmBlockRows;
      const float* src = c.values.data() + r * value_cols;
      const uint8_t* idx = c.indices.data() + r * row_bytes;
      for (int64_t slot = 0; slot < value_cols; ++slot) {
        const int64_t group = slot / n;
        const int64_t chunk = group / groups_per_chunk;
        const int64_t chunk_slot = slot - chunk * lay.slots_per_chunk;
        const int in_group = bits == 0 ? 0 : read_index(idx, row_bytes, slot, bits);
        const int64_t lane = (group - chunk * groups_per_chunk) * m + in_group;
        const int64_t at = lay.offset(0, chunk, chunk_slot) + lane_row;
        vals[at] = src[slot];
        lanes[at] = static_cast<uint8_t>(lane);
      }
    }
  });
}

NmGemmOperand nm_gemm_pack(const CompressedNm& compressed) {
  NmGemmOperand a;
  nm_gemm_pack_into(compressed, a);
  return a;
}

}  // namespace nms
