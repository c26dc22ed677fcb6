#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "nmsparse/core/error.h"

namespace nms::detail {
namespace {

// Closes a descriptor on scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ReadOnlyMapping ReadOnlyMapping::open(const std::filesystem::path& path, std::string_view context) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw Error(concat(context, ": cannot open: ", std::strerror(err)));
  }
  FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    throw Error(concat(context, ": cannot stat: ", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) throw Error(concat(context, ": is a directory, not a file"));
  if (!S_ISREG(st.st_mode)) throw Error(concat(context, ": is not a regular file"));
  ReadOnlyMapping mapping;
  if (st.st_size == 0) return mapping;
  const auto size = static_cast<size_t>(st.st_size);
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    throw Error(concat(context, ": cannot mmap ", size, " bytes: ", std::strerror(err)));
  }
  mapping.data_ = static_cast<const std::byte*>(data);
  mapping.size_ = size;
  return mapping;
}

ReadOnlyMapping::ReadOnlyMapping(ReadOnlyMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ReadOnlyMapping& ReadOnlyMapping::operator=(ReadOnlyMapping&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ReadOnlyMapping::~ReadOnlyMapping() {
  reset();
}

void ReadOnlyMapping::reset() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace nms::detail
