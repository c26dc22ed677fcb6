#include "format/compress_reference.h"

#include <algorithm>
#include <vector>

#include "nmsparse/core/error.h"

namespace nms::reference {
namespace {

// Dense coordinates of element `i` (0 .. m-1) of group `g` in value row `v`.
int64_t dense_row(NmAxis axis, int64_t v, int64_t g, int m, int i) {
  return axis == NmAxis::kRows ? v : g * m + i;
}
int64_t dense_col(NmAxis axis, int64_t v, int64_t g, int m, int i) {
  return axis == NmAxis::kRows ? g * m + i : v;
}

CompressedNm make_empty(int64_t rows, int64_t cols, NmPattern pattern, NmAxis axis) {
  pattern.validate();
  CompressedNm c;
  c.rows = rows;
  c.cols = cols;
  c.pattern = pattern;
  c.axis = axis;
  NMS_CHECK(c.axis_length() % pattern.m == 0, "axis length (", c.axis_length(),
            ") is not a multiple of m (", pattern.m, ")");
  c.values.resize(c.value_rows() * c.value_cols());
  c.indices.resize(c.index_bytes());
  return c;
}

void set_bit(CompressedNm& c, int64_t value_row, int64_t bit) {
  uint8_t* row = c.indices.data() + value_row * c.index_row_bytes();
  row[bit / 8] = static_cast<uint8_t>(row[bit / 8] | (1u << (bit % 8)));
}

// Stores group `g` of value row `v` keeping the (unsorted, distinct) positions in `kept`.
void store_group(CompressedNm& c, ConstMatrixViewF dense, int64_t v, int64_t g,
                 std::vector<int> kept) {
  const int n = c.pattern.n;
  const int m = c.pattern.m;
  NMS_CHECK(static_cast<int>(kept.size()) <= n, "value row ", v, ", group ", g, " keeps ",
            kept.size(), " > n (", n, ")");
  // Pad with the lowest positions not kept; padding slots store +0.0 whatever `dense` holds there.
  std::vector<int> padding;
  for (int p = 0; p < m && static_cast<int>(kept.size() + padding.size()) < n; ++p) {
    bool present = false;
    for (int q : kept) present = present || q == p;
    if (!present) padding.push_back(p);
  }
  std::vector<int> all = kept;
  all.insert(all.end(), padding.begin(), padding.end());
  std::sort(all.begin(), all.end());
  const int b = c.pattern.index_bits();
  for (int s = 0; s < n; ++s) {
    const int p = all[s];
    const int64_t slot = g * n + s;
    const bool is_padding = std::find(padding.begin(), padding.end(), p) != padding.end();
    float value =
        is_padding ? 0.0f : dense(dense_row(c.axis, v, g, m, p), dense_col(c.axis, v, g, m, p));
    if (value == 0.0f) value = 0.0f;  // -0.0 -> +0.0
    c.values[v * c.value_cols() + slot] = value;
    for (int t = 0; t < b; ++t) {
      if ((p >> t) & 1) set_bit(c, v, slot * b + t);
    }
  }
}

}  // namespace

CompressedNm nm_compress_reference(ConstMatrixViewF dense, NmPattern pattern, NmAxis axis) {
  CompressedNm c = make_empty(dense.rows(), dense.cols(), pattern, axis);
  for (int64_t v = 0; v < c.value_rows(); ++v) {
    for (int64_t g = 0; g < c.groups_per_row(); ++g) {
      std::vector<int> kept;
      for (int i = 0; i < pattern.m; ++i) {
        const float x =
            dense(dense_row(axis, v, g, pattern.m, i), dense_col(axis, v, g, pattern.m, i));
        if (x != 0.0f) kept.push_back(i);  // NaN != 0 is true: NaN counts as nonzero.
      }
      store_group(c, dense, v, g, kept);
    }
  }
  return c;
}

CompressedNm nm_compress_masked_reference(ConstMatrixViewF dense, const BitMask& mask,
                                          NmPattern pattern, NmAxis axis) {
  NMS_CHECK(mask.rows() == dense.rows() && mask.cols() == dense.cols(), "mask shape mismatch");
  CompressedNm c = make_empty(dense.rows(), dense.cols(), pattern, axis);
  for (int64_t v = 0; v < c.value_rows(); ++v) {
    for (int64_t g = 0; g < c.groups_per_row(); ++g) {
      std::vector<int> kept;
      for (int i = 0; i < pattern.m; ++i) {
        if (mask.get(dense_row(axis, v, g, pattern.m, i), dense_col(axis, v, g, pattern.m, i))) {
          kept.push_back(i);
        }
      }
      store_group(c, dense, v, g, kept);
    }
  }
  return c;
}

int index_reference(const CompressedNm& c, int64_t value_row, int64_t slot) {
  const int b = c.pattern.index_bits();
  const uint8_t* row = c.indices.data() + value_row * c.index_row_bytes();
  int index = 0;
  for (int t = 0; t < b; ++t) {
    const int64_t bit = slot * b + t;
    if ((row[bit / 8] >> (bit % 8)) & 1) index |= 1 << t;
  }
  return index;
}

Matrix nm_decompress_reference(const CompressedNm& src) {
  src.pattern.validate();
  NMS_CHECK(src.axis_length() % src.pattern.m == 0, "axis length not a multiple of m");
  NMS_CHECK(src.values.size() == src.value_rows() * src.value_cols(), "values size");
  NMS_CHECK(src.indices.size() == src.index_bytes(), "indices size");
  Matrix dst(src.rows, src.cols);
  const int n = src.pattern.n;
  const int m = src.pattern.m;
  for (int64_t v = 0; v < src.value_rows(); ++v) {
    for (int64_t slot = 0; slot < src.value_cols(); ++slot) {
      const int p = index_reference(src, v, slot);
      NMS_CHECK(p < m, "index ", p, " >= m (", m, ")");
      const int64_t g = slot / n;
      dst(dense_row(src.axis, v, g, m, p), dense_col(src.axis, v, g, m, p)) =
          src.values[v * src.value_cols() + slot];
    }
  }
  return dst;
}

}  // namespace nms::reference
