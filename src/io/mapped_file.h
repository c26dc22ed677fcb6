// PRIVATE header: a read-only memory mapping of a whole regular file (POSIX mmap).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace nms::detail {

class ReadOnlyMapping {
 public:
  ReadOnlyMapping() = default;
  // Opens and maps `path` (MAP_PRIVATE, PROT_READ); the descriptor is closed right away. Refuses
  // directories and non-regular files (FIFOs are opened non-blocking, so they cannot hang).
  // Errors: nms::Error "<context>: cannot open: <strerror>" and similar. An empty file maps to an
  // empty span.
  static ReadOnlyMapping open(const std::filesystem::path& path, std::string_view context);

  ReadOnlyMapping(ReadOnlyMapping&& other) noexcept;
  ReadOnlyMapping& operator=(ReadOnlyMapping&& other) noexcept;
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ReadOnlyMapping& operator=(const ReadOnlyMapping&) = delete;
  ~ReadOnlyMapping();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  void reset() noexcept;

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace nms::detail
