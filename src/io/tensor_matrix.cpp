#include "nmsparse/io/tensor_matrix.h"

#include <algorithm>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

struct ConvDims {
  int64_t cout = 0, cin = 0, spatial = 1;
};

ConvDims conv_dims(const std::vector<int64_t>& shape) {
  ConvDims d{shape[0], shape[1], 1};
  for (size_t k = 2; k < shape.size(); ++k) d.spatial *= shape[k];
  return d;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = detail::mul_checked(n, d, "tensor element count");
  return n;
}

}  // namespace

std::string_view layout_name(MatrixLayout layout) {
  switch (layout) {
    case MatrixLayout::kMatrix:
      return "matrix";
    case MatrixLayout::kStacked:
      return "stacked";
    case MatrixLayout::kConv:
      return "conv-nhwc";
  }
  return "?";
}

std::optional<MatrixLayout> layout_from_name(std::string_view name) {
  for (MatrixLayout l : {MatrixLayout::kMatrix, MatrixLayout::kStacked, MatrixLayout::kConv}) {
    if (name == layout_name(l)) return l;
  }
  return std::nullopt;
}

std::optional<TensorMatrixShape> tensor_matrix_shape(const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return std::nullopt;
  const int64_t numel = numel_of(shape);
  if (shape.size() == 2) return TensorMatrixShape{MatrixLayout::kMatrix, shape[0], shape[1]};
  if (shape.size() == 3) {
    return TensorMatrixShape{MatrixLayout::kStacked, shape[0] * shape[1], shape[2]};
  }
  return TensorMatrixShape{MatrixLayout::kConv, shape[0], shape[0] == 0 ? 0 : numel / shape[0]};
}

namespace {

// The conv permutation and its inverse: tensor index (o, c, s) <-> matrix index (o, s, c).
void reorder(const float* src, const std::vector<int64_t>& shape, MatrixLayout layout, float* dst,
             bool to_matrix) {
  if (layout != MatrixLayout::kConv) {
    std::copy(src, src + numel_of(shape), dst);
    return;
  }
  const ConvDims d = conv_dims(shape);
  for (int64_t o = 0; o < d.cout; ++o) {
    for (int64_t c = 0; c < d.cin; ++c) {
      for (int64_t s = 0; s < d.spatial; ++s) {
        const int64_t t = (o * d.cin + c) * d.spatial + s;
        const int64_t m = (o * d.spatial + s) * d.cin + c;
        dst[to_matrix ? m : t] = src[to_matrix ? t : m];
      }
    }
  }
}

}  // namespace

void tensor_to_matrix(const float* src, const std::vector<int64_t>& shape, MatrixLayout layout,
                      float* dst) {
  reorder(src, shape, layout, dst, /*to_matrix=*/true);
}

void matrix_to_tensor(const float* src, const std::vector<int64_t>& shape, MatrixLayout layout,
                      float* dst) {
  reorder(src, shape, layout, dst, /*to_matrix=*/false);
}

}  // namespace nms
