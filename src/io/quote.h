// PRIVATE header: quoting untrusted strings (tensor names, dtype strings, JSON excerpts) for error
// messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nms::detail {

// Returns `text` in single quotes with backslash, quote and every byte outside printable ASCII
// written as \xNN, cut after `max_bytes` input bytes with "..." appended. The result is at most
// 4 * max_bytes + 5 characters, whatever the input.
std::string quote_untrusted(std::string_view text, size_t max_bytes = 80);

}  // namespace nms::detail
