// How an n-D weight tensor maps to the matrix that N:M acts on (DESIGN.md conventions).
//
//   kMatrix   2-D [out, in], as is (a Linear weight; rows = out, groups along in).
//   kStacked  3-D [a, b, in] as [a*b, in] (stacked linears, e.g. experts); same element order.
//   kConv     >= 4-D [Cout, Cin, k1, k2, ...] in PyTorch's order, as [Cout, prod(k)*Cin] with Cin
//             innermost (NHWC, the implicit-GEMM reduction order):
//               matrix(o, s*Cin + c) = tensor(o, c, s)   for the flattened spatial index s.
// Tensors with fewer than 2 dimensions have no matrix.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace nms {

enum class MatrixLayout { kMatrix, kStacked, kConv };
std::string_view layout_name(MatrixLayout layout);  // "matrix", "stacked", "conv-nhwc"
std::optional<MatrixLayout> layout_from_name(std::string_view name);

struct TensorMatrixShape {
  MatrixLayout layout = MatrixLayout::kMatrix;
  int64_t rows = 0;
  int64_t cols = 0;
};

// The matrix view of a tensor shape; nullopt for 0-D and 1-D shapes. Throws on overflow.
std::optional<TensorMatrixShape> tensor_matrix_shape(const std::vector<int64_t>& shape);

// Reorders `src` (the tensor's own element order, prod(shape) floats) into `dst` (row-major
// matrix), and back. The two are inverse permutations; src and dst must not overlap.
void tensor_to_matrix(const float* src, const std::vector<int64_t>& shape, MatrixLayout layout,
                      float* dst);
void matrix_to_tensor(const float* src, const std::vector<int64_t>& shape, MatrixLayout layout,
                      float* dst);

}  // namespace nms
