// PRIVATE header: the safetensors byte format, independent of files and memory ownership.
//
// parse_safetensors validates a complete file image (see the reader contract in
// include/nmsparse/io/safetensors.h) and returns its tensors sorted by offset; plan_safetensors
// lays out a file for the writer. Both report problems as nms::Error prefixed with `context`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nmsparse/io/safetensors.h"

namespace nms::detail {

struct ParsedSafetensors {
  uint64_t header_size = 0;         // N
  std::vector<TensorInfo> tensors;  // sorted by (data_offset, byte_size, name)
  std::map<std::string, std::string> metadata;
};

ParsedSafetensors parse_safetensors(std::span<const std::byte> file, std::string_view context);

struct SafetensorsLayout {
  std::string prefix;             // 8-byte length + header JSON padded with spaces to N % 8 == 0
  std::vector<uint64_t> offsets;  // absolute byte offset of each spec's data, in spec order
  std::vector<uint64_t> sizes;    // byte size of each spec's data
  uint64_t file_size = 0;
};

// Validates `specs` (non-empty unique names other than "__metadata__", valid UTF-8, non-negative
// dims, overflow-checked sizes) and `metadata` (valid UTF-8), and lays the data out in spec order.
SafetensorsLayout plan_safetensors(const std::vector<TensorSpec>& specs,
                                   const std::map<std::string, std::string>& metadata,
                                   std::string_view context);

// "[2, 3]"; long shapes are abbreviated.
std::string format_shape(std::span<const int64_t> shape);

// Element count of `shape`, overflow-checked (nms::Error prefixed with `context`).
int64_t checked_numel(std::span<const int64_t> shape, std::string_view context);

}  // namespace nms::detail
