// Owning, 64-byte aligned, zero-initialised buffers, and an owning row-major float matrix.
//
// 64 bytes is one cache line and one AVX-512 register: kernels may use aligned loads on row 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "nmsparse/core/error.h"
#include "nmsparse/core/matrix_view.h"

namespace nms {

inline constexpr size_t kBufferAlignment = 64;

namespace detail {
// Memory aligned to kBufferAlignment, zeroed if asked (nullptr for 0 bytes; throws
// std::bad_alloc). Blocks of 2 MiB and more are 2 MiB aligned and advised as transparent huge
// pages: zero-filling a fresh 36 MB buffer (a packed 4096 x 4096 matrix) took 31 ms with 4 KiB page
// faults and 5.8 ms with huge pages on the Zen 4 development machine. Release with std::free.
void* aligned_alloc_bytes(size_t bytes, bool zeroed);
}  // namespace detail

template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedBuffer holds plain data only");

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t count) { resize(count); }

  // Reallocates to `count` zeroed elements (previous contents are discarded).
  void resize(int64_t count) { allocate(count, /*zeroed=*/true); }
  // Reallocates to `count` elements with unspecified contents, for a caller that overwrites every
  // element: skips the zero-fill pass over the whole buffer.
  void resize_for_overwrite(int64_t count) { allocate(count, /*zeroed=*/false); }

  AlignedBuffer(AlignedBuffer&&) noexcept = default;
  AlignedBuffer& operator=(AlignedBuffer&&) noexcept = default;
  AlignedBuffer(const AlignedBuffer& other) { *this = other; }
  AlignedBuffer& operator=(const AlignedBuffer& other) {
    if (this != &other) {
      resize(other.size_);
      if (size_ > 0) std::memcpy(data_.get(), other.data_.get(), size_ * sizeof(T));
    }
    return *this;
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](int64_t i) { return data_.get()[i]; }
  const T& operator[](int64_t i) const { return data_.get()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }

 private:
  void allocate(int64_t count, bool zeroed) {
    NMS_CHECK(count >= 0, "negative element count (", count, ")");
    const int64_t bytes =
        detail::mul_checked(count, static_cast<int64_t>(sizeof(T)), "buffer size");
    data_.reset(static_cast<T*>(detail::aligned_alloc_bytes(static_cast<size_t>(bytes), zeroed)));
    size_ = count;
  }

  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t size_ = 0;
};

// Owning dense row-major float matrix (ld == cols).
class Matrix {
 public:
  Matrix() = default;
  Matrix(int64_t rows, int64_t cols)
      : buffer_(detail::mul_checked(rows, cols, "matrix size")), rows_(rows), cols_(cols) {}

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return buffer_.size(); }
  float* data() { return buffer_.data(); }
  const float* data() const { return buffer_.data(); }
  float& operator()(int64_t i, int64_t j) { return buffer_[i * cols_ + j]; }
  float operator()(int64_t i, int64_t j) const { return buffer_[i * cols_ + j]; }
  MatrixViewF view() { return {buffer_.data(), rows_, cols_}; }
  ConstMatrixViewF view() const { return {buffer_.data(), rows_, cols_}; }

 private:
  AlignedBuffer<float> buffer_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

}  // namespace nms
