#include "nmsparse/io/atomic_file.h"

#include <span>

#include "io/temp_file.h"
#include "nmsparse/core/error.h"

namespace nms {

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  detail::AtomicOutput out =
      detail::AtomicOutput::create(path, detail::concat("write_file_atomic: ", path.string()));
  out.write_at(0, std::as_bytes(std::span<const char>(contents.data(), contents.size())));
  out.commit();
}

}  // namespace nms
