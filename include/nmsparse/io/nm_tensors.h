// Compressed N:M tensors inside safetensors files (the spec is docs/format.md, "In safetensors").
//
// A packed tensor `<name>` is stored as
//   <name>.values    [value_rows, value_cols], dtype F32, F16, BF16 or F64 (the source dtype)
//   <name>.indices   U8 [index_bytes], the packed index stream of CompressedNm
//   __metadata__["nmsparse.<name>"] = {"format": "nmsparse-nm", "version": 1, "n": 2, "m": 4,
//       "axis": "rows", "shape": [R, C], "index_bits": 2, "dtype": "F32",
//       "tensor_shape": [...], "layout": "matrix" | "stacked" | "conv-nhwc"}
// so a file is self-describing: shape/tensor_shape/layout restore the original tensor.
//
// compressed-tensors' `sparse-24-bitmask` is stored as `<name>.compressed`, `<name>.bitmask`,
// `<name>.shape` (see nmsparse/format/sparse24_bitmask.h).
//
// Everything read here is validated as hostile input: a missing part, a shape or dtype that does
// not match the metadata, or malformed metadata JSON is an nms::Error naming the tensor.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/format/compressed_nm.h"
#include "nmsparse/format/sparse24_bitmask.h"
#include "nmsparse/io/dtype.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/io/tensor_matrix.h"

namespace nms {

struct PackedNmMeta {
  NmPattern pattern;
  NmAxis axis = NmAxis::kRows;
  int64_t rows = 0;  // matrix shape
  int64_t cols = 0;
  DType dtype = DType::kF32;  // dtype of <name>.values and of the unpacked tensor
  std::vector<int64_t> tensor_shape;
  MatrixLayout layout = MatrixLayout::kMatrix;
};

std::string packed_nm_metadata_key(std::string_view name);
std::string packed_nm_metadata_json(const PackedNmMeta& meta);
PackedNmMeta parse_packed_nm_metadata(std::string_view json, std::string_view name);

// Specs of <name>.values and <name>.indices for a tensor packed with `meta`.
std::vector<TensorSpec> packed_nm_specs(std::string_view name, const PackedNmMeta& meta);
// Writes both parts (values converted to meta.dtype). `c` must match meta.
void write_packed_nm(SafetensorsWriter& writer, std::string_view name, const PackedNmMeta& meta,
                     const CompressedNm& c);

struct PackedNmEntry {
  std::string name;
  PackedNmMeta meta;
  const TensorInfo* values = nullptr;
  const TensorInfo* indices = nullptr;
};
// Every packed tensor described in the file's metadata, validated against the tensors present.
std::vector<PackedNmEntry> find_packed_nm(const SafetensorsFile& file);
// Reads and structurally validates (nm_validate) one packed tensor.
CompressedNm read_packed_nm(const SafetensorsFile& file, const PackedNmEntry& entry);

struct Sparse24Entry {
  std::string name;
  const TensorInfo* compressed = nullptr;
  const TensorInfo* bitmask = nullptr;
  const TensorInfo* shape = nullptr;
  int64_t rows = 0;  // the dense shape, read from <name>.shape
  int64_t cols = 0;
};
// Every `<name>.compressed` with its `.bitmask` and `.shape` (a partial triple is an error), with
// the dense shape read and the parts' sizes checked against it.
std::vector<Sparse24Entry> find_sparse24(const SafetensorsFile& file);
Sparse24Bitmask read_sparse24(const SafetensorsFile& file, const Sparse24Entry& entry);
std::vector<TensorSpec> sparse24_specs(std::string_view name, int64_t rows, int64_t cols,
                                       DType values_dtype);
void write_sparse24(SafetensorsWriter& writer, std::string_view name, const Sparse24Bitmask& s);

}  // namespace nms
