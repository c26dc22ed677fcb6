// The IDX parser (format and contract in nmsparse/data/idx.h).
#include "nmsparse/data/idx.h"

#include <iomanip>
#include <sstream>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

uint32_t load_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? " x " : "") << dims[i];
  return os.str();
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, std::string_view label) {
  NMS_CHECK(bytes.size() >= 4, label, ": truncated: ", bytes.size(),
            " bytes, shorter than the 4-byte IDX magic");
  const uint32_t magic = load_be32(bytes.data());
  NMS_CHECK(bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08, label, ": bad magic ", hex32(magic),
            " (an IDX file of unsigned bytes starts with 0x000008nn)");
  const int ndims = bytes[3];
  NMS_CHECK(ndims >= 1 && ndims <= 4, label, ": bad magic ", hex32(magic), ": ", ndims,
            " dimensions (1..4 are read)");
  const size_t header = 4 + 4 * size_t(ndims);
  NMS_CHECK(bytes.size() >= header, label, ": truncated: ", bytes.size(),
            " bytes, shorter than the ", header, "-byte header of ", ndims, " dimensions");

  IdxArray array;
  int64_t numel = 1;
  bool absurd = false;
  for (int d = 0; d < ndims; ++d) {
    const int64_t dim = load_be32(bytes.data() + 4 + 4 * d);
    array.dims.push_back(dim);
    // numel stays <= kIdxMaxBytes (2^30) and dim < 2^32, so the product cannot overflow.
    if (dim >= (int64_t{1} << 31)) absurd = true;
    if (!absurd) {
      numel *= dim;
      if (numel > kIdxMaxBytes) absurd = true;
    }
  }
  NMS_CHECK(!absurd, label, ": absurd dimensions ", dims_text(array.dims), " (more than ",
            kIdxMaxBytes, " bytes, or a dimension >= 2^31)");
  const size_t data_size = bytes.size() - header;
  NMS_CHECK(data_size >= size_t(numel), label, ": truncated: dimensions ", dims_text(array.dims),
            " need ", numel, " data bytes, only ", data_size, " present");
  NMS_CHECK(data_size == size_t(numel), label, ": ", data_size - size_t(numel),
            " trailing bytes after the ", numel, " data bytes of dimensions ",
            dims_text(array.dims));
  array.data.assign(bytes.begin() + ptrdiff_t(header), bytes.end());
  return array;
}

}  // namespace nms
