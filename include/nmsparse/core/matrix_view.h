// Non-owning 2-D views of row-major matrices with a leading dimension.
//
// Element (i, j) lives at data[i * ld + j]; 0 <= i < rows, 0 <= j < cols, ld >= cols.
// MatrixView<const float> is the read-only view; a MatrixView<float> converts to it implicitly.
// Construction validates the shape (NMS_CHECK); element access does not (NMS_DCHECK only).
#pragma once

#include <cstdint>
#include <type_traits>

#include "nmsparse/core/error.h"

namespace nms {

template <class T>
class MatrixView {
 public:
  MatrixView() = default;
  MatrixView(T* data, int64_t rows, int64_t cols) : MatrixView(data, rows, cols, cols) {}
  MatrixView(T* data, int64_t rows, int64_t cols, int64_t ld)
      : data_(data), rows_(rows), cols_(cols), ld_(ld) {
    NMS_CHECK(rows >= 0 && cols >= 0, "negative shape (", rows, " x ", cols, ")");
    NMS_CHECK(ld >= cols, "leading dimension (", ld, ") is smaller than cols (", cols, ")");
    NMS_CHECK(data != nullptr || rows == 0 || cols == 0, "null data for a ", rows, " x ", cols,
              " matrix");
  }
  // const-adding conversion: MatrixView<float> -> MatrixView<const float>.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  MatrixView(const MatrixView<U>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), rows_(other.rows()), cols_(other.cols()), ld_(other.ld()) {}

  T* data() const { return data_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t ld() const { return ld_; }
  int64_t size() const { return rows_ * cols_; }
  bool contiguous() const { return ld_ == cols_ || rows_ <= 1; }

  T& operator()(int64_t i, int64_t j) const {
    NMS_DCHECK(i >= 0 && i < rows_ && j >= 0 && j < cols_, "(", i, ", ", j, ") outside ", rows_,
               " x ", cols_);
    return data_[i * ld_ + j];
  }
  T* row(int64_t i) const {
    NMS_DCHECK(i >= 0 && i < rows_);
    return data_ + i * ld_;
  }

 private:
  T* data_ = nullptr;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t ld_ = 0;
};

using ConstMatrixViewF = MatrixView<const float>;
using MatrixViewF = MatrixView<float>;

}  // namespace nms
