// nm_gemm_pack: compressed N:M matrix -> the packed operand of nm_gemm (nm_gemm_layout.h).
#include <cstring>

#include "core/parallel.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {
namespace {

// In-group index of slot `slot` of an index row (bits per index <= 6, LSB first).
inline int read_index(const uint8_t* row, int64_t row_bytes, int64_t slot, int bits) {
  const int64_t bit = slot * bits;
  const int64_t byte = bit >> 3;
  unsigned word = row[byte];
  if (byte + 1 < row_bytes) word |= static_cast<unsigned>(row[byte + 1]) << 8;
  return static_cast<int>((word >> (bit & 7)) & ((1u << bits) - 1u));
}

}  // namespace

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
  const detail::NmGemmLayout lay(r_count, k, c.pattern.n, c.pattern.m);
  if (dst.packed.size() != lay.total_floats()) dst.packed.resize_for_overwrite(lay.total_floats());
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  const int bits = c.pattern.index_bits();
  const int64_t row_bytes = c.index_row_bytes();
  detail::parallel_for(lay.tiles, [&](int64_t tile) {
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      const int64_t r = tile * kNmGemmTileRows + l;
      const float* src = r < r_count ? c.values.data() + r * lay.slots_per_row : nullptr;
      const uint8_t* idx = r < r_count ? c.indices.data() + r * row_bytes : nullptr;
      for (int64_t g = 0; g < lay.slots_per_row; ++g) {
        float* e = dst.packed.data() + lay.entry(tile, g, l);
        int32_t offset = 0;
        float value = 0.0f;  // padding rows: value 0 at the block's first column
        if (src != nullptr) {
          const int64_t col = g / n * m + (bits == 0 ? 0 : read_index(idx, row_bytes, g, bits));
          offset = static_cast<int32_t>((col % lay.depth_block) * kNmGemmPanel);
          value = src[g];
        }
        e[0] = value;
        std::memcpy(e + 1, &offset, sizeof(offset));
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
