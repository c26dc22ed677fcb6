// PRIVATE header: strict JSON parsing of untrusted text with nlohmann::json.
//
// nlohmann::json::parse keeps the last of duplicate object keys silently, and reports errors with
// its own exception types. parse_strict_json instead rejects duplicate keys at any depth, nesting
// deeper than `max_depth`, arrays longer than `max_array_size`, and anything after the value
// except JSON whitespace, and reports every problem as nms::Error whose message starts with
// `context` (e.g. "SafetensorsFile::open: model.safetensors: header") and quotes the offending
// key or byte position. nlohmann validates UTF-8 inside strings.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nms::detail {

struct JsonLimits {
  size_t max_depth = 16;         // nesting of objects/arrays; the root container is depth 1
  size_t max_array_size = 4096;  // elements in any one array
};

nlohmann::json parse_strict_json(std::string_view text, std::string_view context,
                                 JsonLimits limits = {});

}  // namespace nms::detail
