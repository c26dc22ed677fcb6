#include "nmsparse/core/matrix_view.h"

#include <gtest/gtest.h>

#include "nmsparse/core/aligned_buffer.h"

namespace nms {
namespace {

TEST(MatrixView, StridedAccess) {
  float data[12];
  for (int k = 0; k < 12; ++k) data[k] = static_cast<float>(k);
  const MatrixViewF v(data, 3, 2, 4);
  EXPECT_EQ(v(2, 1), 9.0f);
  EXPECT_EQ(v.row(1)[0], 4.0f);
  EXPECT_FALSE(v.contiguous());
  const ConstMatrixViewF c = v;  // const-adding conversion
  EXPECT_EQ(c(1, 1), 5.0f);
}

TEST(MatrixView, RejectsBadShapes) {
  float data[4] = {};
  EXPECT_THROW(MatrixViewF(data, 2, 3, 2), Error);
  EXPECT_THROW(MatrixViewF(data, -1, 2), Error);
  EXPECT_THROW(MatrixViewF(nullptr, 2, 2), Error);
  EXPECT_NO_THROW(MatrixViewF(nullptr, 0, 5));
}

TEST(AlignedBuffer, AlignedZeroedAndCopyable) {
  AlignedBuffer<float> b(33);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kBufferAlignment, 0u);
  for (float x : b) EXPECT_EQ(x, 0.0f);
  b[5] = 2.5f;
  AlignedBuffer<float> copy = b;
  EXPECT_EQ(copy[5], 2.5f);
  EXPECT_EQ(copy.size(), 33);
  AlignedBuffer<float> empty(0);
  EXPECT_TRUE(empty.empty());
  EXPECT_THROW(AlignedBuffer<float>(-2), Error);
  Matrix m(3, 5);
  m(2, 4) = 1.0f;
  EXPECT_EQ(m.view()(2, 4), 1.0f);
}

}  // namespace
}  // namespace nms
