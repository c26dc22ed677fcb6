// IDX files (the format of MNIST and Fashion-MNIST; http://yann.lecun.com/exdb/mnist/):
//   [4 bytes]  magic: 0x00, 0x00, type, ndims     (type 0x08 = unsigned byte, the only one read)
//   [4 bytes]  × ndims: each dimension, big-endian uint32
//   [rest]     the data, prod(dims) bytes, row-major (last dimension fastest)
// So images are magic 0x00000803 (count, rows, cols) and labels 0x00000801 (count).
//
// parse_idx treats every byte as hostile and throws nms::Error "parse_idx: <label>: <defect>" when
// the input is shorter than its header, the first two bytes are not zero, the type is not 0x08,
// ndims is not 1..4, a dimension is >= 2^31 or prod(dims) exceeds kIdxMaxBytes ("absurd
// dimensions"), the data is shorter than prod(dims) ("truncated") or longer ("trailing bytes").
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace nms {

// The largest data an IDX file may declare, and the largest decompressed size read from a .gz.
inline constexpr int64_t kIdxMaxBytes = int64_t{1} << 30;  // 1 GiB

struct IdxArray {
  std::vector<int64_t> dims;  // 1..4 entries, each in [0, 2^31)
  std::vector<uint8_t> data;  // prod(dims) bytes, row-major
};

// `label` names the input in messages (a file name).
IdxArray parse_idx(std::span<const uint8_t> bytes, std::string_view label);

}  // namespace nms
