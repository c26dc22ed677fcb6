// Element types of tensors stored in safetensors files.
//
// The names are the exact spellings of the safetensors header ("F32", "BF16", "BOOL", ...).
// Safetensors dtypes outside this list (U16/U32/U64, the F8/F4 families, complex) are not
// supported: dtype_from_name returns std::nullopt for them and the reader reports the tensor and
// the dtype. All multi-byte types are stored little-endian.
#pragma once

#include <optional>
#include <string_view>

namespace nms {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Safetensors spelling: "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
std::string_view dtype_name(DType dtype);

// Inverse of dtype_name; exact, case-sensitive match. std::nullopt for anything else.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes per element: 8, 4, 2, 2, 8, 4, 2, 1, 1, 1 in enum order.
int dtype_size(DType dtype);

// True for F64, F32, F16 and BF16: the dtypes that convert to and from float.
bool dtype_is_float(DType dtype);

}  // namespace nms
