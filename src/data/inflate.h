// PRIVATE header: bounded zlib/gzip decompression and whole-file reads for the data layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace nms::detail {

enum class ZFormat {
  kGzip,  // one or more gzip members; the whole input must be consumed
  kZlib,  // one zlib stream; decoding stops at its end, the bytes after it are not looked at
};

struct Inflated {
  std::vector<uint8_t> bytes;
  size_t consumed = 0;  // input bytes used (all of them for kGzip)
};

// Decompresses `src`, refusing output longer than `max_out` bytes (without ever holding more than
// max_out + 1 of it), truncated or corrupt streams and, for kGzip, bytes after the last member
// that do not start another member. Errors: nms::Error "<context>: <defect>".
Inflated inflate_bounded(std::span<const uint8_t> src, ZFormat format, uint64_t max_out,
                         std::string_view context);

// True when `src` starts with the gzip magic bytes 1f 8b.
bool has_gzip_magic(std::span<const uint8_t> src);

// The bytes of the regular file `path`, at most `max_bytes` of them. A missing file is an
// nms::Error "<context>: not found" followed by `missing_hint` (e.g. "; run ..."); other failures
// carry the strerror text.
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, uint64_t max_bytes,
                                     std::string_view context, std::string_view missing_hint);

}  // namespace nms::detail
