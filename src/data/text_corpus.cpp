// Text corpora: the Jane Austen R data file, plain/gzip text files, and the byte vocabulary.
// Formats and contracts in nmsparse/data/text_corpus.h.
#include "nmsparse/data/text_corpus.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "data/inflate.h"
#include "nmsparse/core/error.h"

namespace nms {
namespace {

constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;  // 1 GiB, for every decompressed size

constexpr uint32_t kStrSxp = 16;     // character vector
constexpr uint32_t kCharSxp = 9;     // one string
constexpr uint32_t kLatin1Mask = 4;  // CHARSXP encoding flag, in the "levels" (flags >> 12)

uint32_t load_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// Bounds-checked big-endian reads from one decompressed R serialisation.
class XdrReader {
 public:
  XdrReader(std::span<const uint8_t> bytes, const std::string& context)
      : bytes_(bytes), context_(context) {}

  std::span<const uint8_t> take(uint64_t n, const char* what) {
    if (n > bytes_.size() - pos_) {
      throw Error(detail::concat(context_, ": truncated R serialisation: ", what, " needs ", n,
                                 " bytes at byte ", pos_, ", only ", bytes_.size() - pos_,
                                 " remain"));
    }
    const std::span<const uint8_t> out = bytes_.subspan(pos_, size_t(n));
    pos_ += size_t(n);
    return out;
  }
  uint32_t u32(const char* what) { return load_be32(take(4, what).data()); }
  int32_t i32(const char* what) { return static_cast<int32_t>(u32(what)); }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  const std::string& context_;
};

// Appends `src` (ISO 8859-1) to `dst` as UTF-8.
void append_latin1_as_utf8(std::span<const uint8_t> src, std::string& dst) {
  for (const uint8_t c : src) {
    if (c < 0x80) {
      dst.push_back(char(c));
    } else {
      dst.push_back(char(0xc0 | (c >> 6)));
      dst.push_back(char(0x80 | (c & 0x3f)));
    }
  }
}

// Appends the elements of the serialised object to `text` if it is a character vector; returns
// whether it was one.
bool append_strsxp(std::span<const uint8_t> serialised, const std::string& context,
                   std::string& text) {
  XdrReader in(serialised, context);
  const std::span<const uint8_t> format = in.take(2, "the format tag");
  if (format[0] != 'X' || format[1] != '\n') {
    throw Error(detail::concat(context, ": R serialisation format bytes 0x", std::hex,
                               int(format[0]), " 0x", int(format[1]), std::dec,
                               ", only XDR (\"X\\n\") is read"));
  }
  const int32_t version = in.i32("the serialisation version");
  if (version != 2 && version != 3) {
    throw Error(
        detail::concat(context, ": R serialisation version ", version, ", only 2 and 3 are read"));
  }
  in.take(8, "the R versions");
  if (version == 3) {
    const int32_t encoding_length = in.i32("the native encoding length");
    if (encoding_length < 0) {
      throw Error(detail::concat(context, ": negative native encoding length ", encoding_length));
    }
    in.take(uint32_t(encoding_length), "the native encoding name");
  }
  const uint32_t flags = in.u32("the object flags");
  if ((flags & 0xff) != kStrSxp) return false;

  int64_t count = in.i32("the vector length");
  if (count == -1) {  // a long vector: two 32-bit halves follow
    const uint64_t upper = in.u32("the long vector length");
    const uint64_t lower = in.u32("the long vector length");
    count = upper >= (uint64_t{1} << 31) ? -1 : int64_t(upper << 32 | lower);
  }
  // Every element takes at least 8 bytes (flags, length).
  if (count < 0 || uint64_t(count) > in.remaining() / 8) {
    throw Error(detail::concat(context, ": character vector of ", count,
                               " elements cannot fit in the ", in.remaining(),
                               " bytes that remain"));
  }
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t element_flags = in.u32("an element's flags");
    if ((element_flags & 0xff) != kCharSxp) {
      throw Error(detail::concat(context, ": element ", i, " of the character vector has type ",
                                 element_flags & 0xff, ", not CHARSXP (9)"));
    }
    const int32_t length = in.i32("an element's length");
    if (length < -1) {
      throw Error(detail::concat(context, ": element ", i, " has length ", length));
    }
    if (length > 0) {  // -1 is NA_character_: an empty line, like ""
      const std::span<const uint8_t> chars = in.take(uint32_t(length), "an element's bytes");
      if (((element_flags >> 12) & kLatin1Mask) != 0) {
        append_latin1_as_utf8(chars, text);
      } else {
        text.append(reinterpret_cast<const char*>(chars.data()), chars.size());
      }
    }
    text.push_back('\n');
  }
  return true;
}

}  // namespace

std::filesystem::path austen_default_path() {
  const char* env = std::getenv("NMSPARSE_AUSTEN");
  if (env != nullptr && *env != '\0') return env;
  std::filesystem::path cache;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') {
    cache = xdg;
  } else {
    const char* home = std::getenv("HOME");
    NMS_CHECK(home != nullptr && *home != '\0',
              "neither NMSPARSE_AUSTEN, XDG_CACHE_HOME nor HOME is set");
    cache = std::filesystem::path(home) / ".cache";
  }
  return cache / "nmsparse" / "janeaustenr" / "Rdata.rdb";
}

std::string parse_austen_rdata(std::span<const uint8_t> bytes, std::string_view label) {
  std::string text;
  uint64_t declared_total = 0;
  int vectors = 0;
  int chunk = 0;
  size_t pos = 0;
  for (; pos < bytes.size(); ++chunk) {
    const std::string context =
        detail::concat("parse_austen_rdata: ", label, ": chunk ", chunk, " at offset ", pos);
    if (bytes.size() - pos < 4) {
      throw Error(detail::concat(context, ": truncated chunk header (", bytes.size() - pos,
                                 " bytes, the length takes 4)"));
    }
    const uint32_t length = load_be32(bytes.data() + pos);
    declared_total += length;
    if (declared_total > kMaxTextBytes) {
      throw Error(detail::concat(context, ": declares ", length, " bytes, more than ",
                                 kMaxTextBytes, " in all"));
    }
    const detail::Inflated serialised =
        detail::inflate_bounded(bytes.subspan(pos + 4), detail::ZFormat::kZlib, length, context);
    if (serialised.bytes.size() != length) {
      throw Error(detail::concat(context, ": inflates to ", serialised.bytes.size(),
                                 " bytes, the chunk declares ", length));
    }
    if (append_strsxp(serialised.bytes, context, text)) ++vectors;
    pos += 4 + serialised.consumed;
  }
  NMS_CHECK(vectors > 0, label, ": no character vector in its ", chunk, " chunks (", bytes.size(),
            " bytes)");
  return text;
}

std::string load_austen(const std::filesystem::path& rdb) {
  const std::string context = detail::concat("load_austen: ", rdb.string());
  const std::vector<uint8_t> bytes = detail::read_file_bytes(
      rdb, kMaxTextBytes, context,
      " (run scripts/fetch-austen.sh to install it, or set NMSPARSE_AUSTEN to its path)");
  return parse_austen_rdata(bytes, rdb.string());
}

std::string load_text_file(const std::filesystem::path& path) {
  const std::string context = detail::concat("load_text_file: ", path.string());
  std::vector<uint8_t> bytes = detail::read_file_bytes(path, kMaxTextBytes, context, "");
  if (path.extension() == ".gz") {
    bytes = detail::inflate_bounded(bytes, detail::ZFormat::kGzip, kMaxTextBytes, context).bytes;
  }
  return std::string(bytes.begin(), bytes.end());
}

CharVocab CharVocab::from_text(std::string_view text) {
  std::array<bool, 256> seen{};
  for (const char c : text) seen[uint8_t(c)] = true;
  CharVocab vocab;
  vocab.index.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    vocab.index[b] = int16_t(vocab.symbols.size());
    vocab.symbols.push_back(uint8_t(b));
  }
  return vocab;
}

int64_t CharVocab::size() const {
  return int64_t(symbols.size());
}

std::vector<int64_t> CharVocab::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t b = uint8_t(text[i]);
    const int64_t id = index[b];
    if (id < 0 || id >= size()) {
      throw Error(detail::concat("CharVocab::encode: byte ", int(b), " (0x", std::hex, int(b),
                                 std::dec, ") at offset ", i, " is not in the vocabulary of ",
                                 size(), " symbols"));
    }
    ids[i] = id;
  }
  return ids;
}

std::string CharVocab::decode(std::span<const int64_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size()) {
      throw Error(detail::concat("CharVocab::decode: id ", ids[i], " at position ", i,
                                 " is outside the vocabulary [0, ", size(), ")"));
    }
    text[i] = char(symbols[size_t(ids[i])]);
  }
  return text;
}

}  // namespace nms
