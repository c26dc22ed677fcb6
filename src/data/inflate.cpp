// Bounded zlib/gzip decompression (zlib's inflate, fed and drained in pieces so that no length
// exceeds its 32-bit counters) and whole-file reads.
#include "data/inflate.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>

#include "io/mapped_file.h"
#include "nmsparse/core/error.h"

namespace nms::detail {
namespace {

constexpr size_t kMaxPiece = std::numeric_limits<uInt>::max();
constexpr uint64_t kMaxDeflateRatio = 1032;

class InflateStream {
 public:
  InflateStream(ZFormat format, std::string_view context) {
    // 15 + 16: gzip wrapper only; 15: zlib wrapper only. The maximal window either way.
    const int window_bits = format == ZFormat::kGzip ? 15 + 16 : 15;
    const int rc = inflateInit2(&zs_, window_bits);
    if (rc != Z_OK) throw Error(concat(context, ": inflateInit2 failed (zlib code ", rc, ")"));
  }
  ~InflateStream() { inflateEnd(&zs_); }
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;
  z_stream* get() { return &zs_; }

 private:
  z_stream zs_{};
};

}  // namespace

bool has_gzip_magic(std::span<const uint8_t> src) {
  return src.size() >= 2 && src[0] == 0x1f && src[1] == 0x8b;
}

Inflated inflate_bounded(std::span<const uint8_t> src, ZFormat format, uint64_t max_out,
                         std::string_view context) {
  const char* what = format == ZFormat::kGzip ? "gzip" : "zlib";
  if (format == ZFormat::kGzip && !has_gzip_magic(src)) {
    throw Error(concat(context, ": not gzip data (the first bytes are not 1f 8b)"));
  }
  InflateStream stream(format, context);
  z_stream* zs = stream.get();

  // Output grows by doubling up to max_out + 1 bytes: reaching that extra byte proves the data
  // decompresses to more than max_out. The first allocation is a guess that hostile input cannot
  // inflate: deflate expands at most ~1032:1, and gzip's trailer gives the size of a single member
  // (mod 2^32), so the common case needs no regrowth and no copy.
  const uint64_t out_cap = max_out + 1;
  uint64_t guess = std::min(out_cap, kMaxDeflateRatio * src.size() + 64);
  if (format == ZFormat::kGzip && src.size() >= 4) {
    const uint8_t* t = src.data() + src.size() - 4;
    const uint64_t isize =
        uint64_t{t[0]} | uint64_t{t[1]} << 8 | uint64_t{t[2]} << 16 | uint64_t{t[3]} << 24;
    guess = std::min(guess, isize + 1);
  }
  std::vector<uint8_t> out(size_t(std::max<uint64_t>(std::min<uint64_t>(out_cap, 4096), guess)));
  size_t produced = 0;
  size_t fed = 0;  // input bytes handed to zlib so far (consumed = fed - avail_in)
  for (;;) {
    if (zs->avail_in == 0 && fed < src.size()) {
      const size_t piece = std::min(src.size() - fed, kMaxPiece);
      zs->next_in = const_cast<Bytef*>(src.data() + fed);  // zlib does not write through it
      zs->avail_in = static_cast<uInt>(piece);
      fed += piece;
    }
    if (produced == out.size()) {
      if (out.size() >= out_cap) {
        throw Error(
            concat(context, ": ", what, " data decompresses to more than ", max_out, " bytes"));
      }
      out.resize(static_cast<size_t>(std::min<uint64_t>(out_cap, 2 * uint64_t{out.size()})));
    }
    const size_t room = std::min(out.size() - produced, kMaxPiece);
    zs->next_out = out.data() + produced;
    zs->avail_out = static_cast<uInt>(room);
    const int rc = inflate(zs, Z_NO_FLUSH);
    produced += room - zs->avail_out;
    const size_t consumed = fed - zs->avail_in;
    if (produced > max_out) {
      throw Error(
          concat(context, ": ", what, " data decompresses to more than ", max_out, " bytes"));
    }
    if (rc == Z_OK) continue;  // progress was made
    if (rc == Z_STREAM_END) {
      if (format == ZFormat::kZlib || consumed == src.size()) {
        out.resize(produced);
        return Inflated{std::move(out), consumed};
      }
      // gzip: another member may follow (as `cat a.gz b.gz` makes); anything else is refused.
      if (!has_gzip_magic(src.subspan(consumed))) {
        throw Error(concat(context, ": ", src.size() - consumed,
                           " trailing bytes after the gzip data (at offset ", consumed, ")"));
      }
      inflateReset(zs);
      continue;
    }
    if (rc == Z_BUF_ERROR) {
      // No progress possible: more room (grown above) or more input (fed above), if there is any.
      if (zs->avail_out == 0 || (zs->avail_in == 0 && fed < src.size())) continue;
      if (zs->avail_in == 0) {
        throw Error(concat(context, ": truncated ", what, " data (the stream ends after ",
                           src.size(), " bytes, ", produced, " decompressed)"));
      }
    }
    throw Error(concat(context, ": corrupt ", what, " data near input offset ", consumed, " (",
                       zs->msg != nullptr ? zs->msg : "zlib code", ", ", rc, ")"));
  }
}

std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path, uint64_t max_bytes,
                                     std::string_view context, std::string_view missing_hint) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (!ec && !exists) throw Error(concat(context, ": not found", missing_hint));
  const ReadOnlyMapping mapping = ReadOnlyMapping::open(path, context);
  const std::span<const std::byte> bytes = mapping.bytes();
  if (bytes.size() > max_bytes) {
    throw Error(concat(context, ": the file has ", bytes.size(), " bytes, more than the ",
                       max_bytes, " accepted"));
  }
  std::vector<uint8_t> copy(bytes.size());
  if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
  return copy;
}

}  // namespace nms::detail
