#include "io/quote.h"

namespace nms::detail {

std::string quote_untrusted(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const bool truncated = text.size() > max_bytes;
  if (truncated) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size() + 8);
  out += '\'';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\\' || byte == '\'') {
      out += '\\';
      out += c;
    } else if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  out += '\'';
  if (truncated) out += "...";
  return out;
}

}  // namespace nms::detail
