#include "nmsparse/io/dtype.h"

#include <array>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 10> kDTypes = {{
    {DType::kF64, "F64", 8, true},
    {DType::kF32, "F32", 4, true},
    {DType::kF16, "F16", 2, true},
    {DType::kBF16, "BF16", 2, true},
    {DType::kI64, "I64", 8, false},
    {DType::kI32, "I32", 4, false},
    {DType::kI16, "I16", 2, false},
    {DType::kI8, "I8", 1, false},
    {DType::kU8, "U8", 1, false},
    {DType::kBool, "BOOL", 1, false},
}};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  NMS_CHECK(index < kDTypes.size(), "invalid DType value ", static_cast<int>(dtype));
  NMS_ASSERT(kDTypes[index].dtype == dtype, "dtype table out of order");
  return kDTypes[index];
}

}  // namespace

std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

int dtype_size(DType dtype) {
  return info(dtype).size;
}

bool dtype_is_float(DType dtype) {
  return info(dtype).is_float;
}

}  // namespace nms
