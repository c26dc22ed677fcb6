// nm_gemm_pack: compressed N:M matrix -> the packed operand of nm_gemm (nm_gemm_layout.h).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "core/parallel.h"
#include "kernels/nm_gemm_lanes.h"
#include "kernels/nm_gemm_layout.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/kernels/nm_gemm.h"

namespace nms {
namespace {

// Reads consecutive `bits`-wide fields (LSB first) of an index row.
class IndexReader {
 public:
  IndexReader(const uint8_t* row, int64_t bytes, int bits)
      : row_(row), bytes_(bytes), bits_(bits), mask_((uint64_t{1} << bits) - 1) {}
  int next() {
    if (have_ < bits_) {  // refill whole bytes while they fit in the 64-bit buffer
      while (have_ <= 56 && pos_ < bytes_) {
        buffer_ |= uint64_t{row_[pos_++]} << have_;
        have_ += 8;
      }
    }
    const auto v = static_cast<int>(buffer_ & mask_);
    buffer_ >>= bits_;
    have_ -= bits_;
    return v;
  }

 private:
  const uint8_t* row_;
  int64_t bytes_;
  int bits_;
  uint64_t mask_;
  uint64_t buffer_ = 0;
  int have_ = 0;
  int64_t pos_ = 0;
};

}  // namespace

namespace detail {

int64_t nm_gemm_depth_block(int m) {
  const int64_t cap = isa_active() == Isa::kAvx2 ? kNmGemmDepthBlockAvx2 : kNmGemmMaxDepthBlock;
  return cap / m * m;
}

// shared[b · tiles + tile] = 1 when every real row of the tile has the same offset as its first
// row at every slot of depth block b (padding rows hold value 0 and do not matter).
void mark_shared_tiles(NmGemmOperand& a) {
  const NmGemmLayout lay(a.rows, a.depth, a.pattern.n, a.pattern.m, a.depth_block);
  const int64_t count = lay.depth_blocks * lay.tiles;
  if (a.shared.size() != count) a.shared.resize_for_overwrite(count);
  parallel_for(lay.tiles, [&](int64_t tile) {
    const int64_t real = std::min<int64_t>(kNmGemmTileRows, a.rows - tile * kNmGemmTileRows);
    for (int64_t b = 0; b < lay.depth_blocks; ++b) {
      bool same = true;
      for (int64_t g = lay.block_first_slot(b); g < lay.block_last_slot(b) && same; ++g) {
        const float* e = a.packed.data() + lay.entry(tile, g, 0);
        for (int64_t l = 1; l < real; ++l) same = same && std::memcmp(e + 1, e + 2 * l + 1, 4) == 0;
      }
      a.shared.data()[b * lay.tiles + tile] = same ? 1 : 0;
    }
  });
}

}  // namespace detail

void detail::nm_gemm_pack_entries_into(const CompressedNm& c, NmGemmOperand& dst) {
  dst.lane_mask = BitMask();  // lanes built from these entries are not a masked pack's
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
  dst.depth_block = detail::nm_gemm_depth_block(c.pattern.m);
  const detail::NmGemmLayout lay(r_count, k, c.pattern.n, c.pattern.m, dst.depth_block);
  if (dst.packed.size() != lay.total_floats()) dst.packed.resize_for_overwrite(lay.total_floats());
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  const int bits = c.pattern.index_bits();
  const int64_t row_bytes = c.index_row_bytes();
  // The 6 rows of a tile are read side by side so the entries are written in order; per row the
  // column advances by m per group and wraps into the next depth block every kc / m groups (no
  // divisions per slot). Padding rows read as value 0, in-group index 0. An index >= m (possible
  // when m is not a power of two) would send nm_gemm outside its panel: it is refused.
  std::atomic<bool> bad_index{false};
  detail::parallel_for(lay.tiles, [&](int64_t tile) {
    const float* src[kNmGemmTileRows];
    std::optional<IndexReader> idx[kNmGemmTileRows];
    for (int64_t l = 0; l < kNmGemmTileRows; ++l) {
      const int64_t r = tile * kNmGemmTileRows + l;
      src[l] = r < r_count ? c.values.data() + r * lay.slots_per_row : nullptr;
      if (r < r_count && bits > 0)
        idx[l].emplace(c.indices.data() + r * row_bytes, row_bytes, bits);
    }
    int64_t g = 0;
    for (int64_t b = 0; b < lay.depth_blocks; ++b) {
      float* e = dst.packed.data() + lay.entry(tile, lay.block_first_slot(b), 0);
      const int64_t groups = lay.block_width(b) / m;
      for (int64_t gi = 0; gi < groups; ++gi) {
        for (int j = 0; j < n; ++j, ++g) {
          for (int64_t l = 0; l < kNmGemmTileRows; ++l, e += 2) {
            float value = 0.0f;
            int32_t offset = 0;
            if (src[l] != nullptr) {
              value = src[l][g];
              const int in_group = bits == 0 ? 0 : static_cast<int>(idx[l]->next());
              if (in_group >= m) bad_index.store(true, std::memory_order_relaxed);
              offset = static_cast<int32_t>((gi * m + in_group) * kNmGemmPanel);
            }
            e[0] = value;
            std::memcpy(e + 1, &offset, sizeof(offset));
          }
        }
      }
    }
  });
  if (bad_index.load()) {  // name the first one, in row-major order
    for (int64_t r = 0; r < r_count; ++r) {
      IndexReader reader(c.indices.data() + r * row_bytes, row_bytes, bits);
      for (int64_t s = 0; s < lay.slots_per_row; ++s) {
        const int in_group = reader.next();
        NMS_CHECK(in_group < m, "row ", r, " slot ", s, " has in-group index ", in_group, " >= m (",
                  m, ")");
      }
    }
  }
  detail::mark_shared_tiles(dst);
}

void nm_gemm_pack_into(const CompressedNm& compressed, NmGemmOperand& dst) {
  detail::nm_gemm_pack_entries_into(compressed, dst);
  detail::nm_gemm_lanes_from_entries(dst);
}

NmGemmOperand nm_gemm_pack(const CompressedNm& compressed) {
  NmGemmOperand a;
  nm_gemm_pack_into(compressed, a);
  return a;
}

}  // namespace nms
