#include "nmsparse/core/nm_pattern.h"

#include <charconv>

#include "nmsparse/core/error.h"

namespace nms {

void NmPattern::validate() const {
  NMS_CHECK(m >= 1 && m <= kMaxGroupSize, "group size m (", m, ") must be in [1, ", kMaxGroupSize,
            "] (pattern ", n, ":", m, ")");
  NMS_CHECK(n >= 1, "kept count n (", n, ") must be at least 1 (pattern ", n, ":", m, ")");
  NMS_CHECK(n <= m, "kept count n (", n, ") exceeds group size m (", m, "); N:M means keep N of M");
}

NmPattern NmPattern::make(int n, int m) {
  NmPattern p{n, m};
  p.validate();
  return p;
}

NmPattern NmPattern::parse(std::string_view text) {
  const auto colon = text.find(':');
  auto parse_int = [&](std::string_view part, int& out) {
    if (part.empty() || part.size() > 6) return false;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && ptr == part.data() + part.size();
  };
  int n = 0;
  int m = 0;
  NMS_CHECK(colon != std::string_view::npos && parse_int(text.substr(0, colon), n) &&
                parse_int(text.substr(colon + 1), m),
            "malformed pattern '", text, "': expected N:M with N kept of every M, e.g. 2:4");
  return make(n, m);
}

int NmPattern::index_bits() const {
  int bits = 0;
  while ((1 << bits) < m) ++bits;
  return bits;
}

}  // namespace nms
