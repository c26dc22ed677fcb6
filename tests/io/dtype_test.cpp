#include "nmsparse/io/dtype.h"

#include <gtest/gtest.h>

namespace nms {
namespace {

TEST(DType, NamesSizesAndKinds) {
  struct Row {
    DType dtype;
    const char* name;
    int size;
    bool is_float;
  };
  const Row rows[] = {
      {DType::kF64, "F64", 8, true},  {DType::kF32, "F32", 4, true},
      {DType::kF16, "F16", 2, true},  {DType::kBF16, "BF16", 2, true},
      {DType::kI64, "I64", 8, false}, {DType::kI32, "I32", 4, false},
      {DType::kI16, "I16", 2, false}, {DType::kI8, "I8", 1, false},
      {DType::kU8, "U8", 1, false},   {DType::kBool, "BOOL", 1, false},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(dtype_size(row.dtype), row.size) << row.name;
    EXPECT_EQ(dtype_is_float(row.dtype), row.is_float) << row.name;
    ASSERT_TRUE(dtype_from_name(row.name).has_value()) << row.name;
    EXPECT_EQ(*dtype_from_name(row.name), row.dtype);
  }
}

TEST(DType, FromNameIsExact) {
  EXPECT_FALSE(dtype_from_name("f32"));
  EXPECT_FALSE(dtype_from_name("F32 "));
  EXPECT_FALSE(dtype_from_name(""));
  EXPECT_FALSE(dtype_from_name("U16"));
  EXPECT_FALSE(dtype_from_name("F8_E4M3"));
  EXPECT_FALSE(dtype_from_name("bool"));
}

}  // namespace
}  // namespace nms
