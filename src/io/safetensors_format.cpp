#include "io/safetensors_format.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/quote.h"
#include "io/strict_json.h"
#include "nmsparse/core/error.h"

namespace nms::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swapping");

using json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

// Header limits: valid headers nest 3 deep (root, tensor entry, shape) and shapes are short.
constexpr JsonLimits kHeaderJsonLimits{.max_depth = 8, .max_array_size = 1024};

[[noreturn]] void fail_tensor(std::string_view context, std::string_view name,
                              const std::string& what) {
  throw Error(concat(context, ": tensor ", quote_untrusted(name), ": ", what));
}

// A JSON number that is a non-negative integer; `what` names it in messages.
uint64_t read_unsigned(const json& value, std::string_view context, std::string_view name,
                       std::string_view what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    fail_tensor(context, name, concat(what, " is negative (", value.get<int64_t>(), ")"));
  }
  fail_tensor(
      context, name,
      concat(what, " is not a non-negative integer (", quote_untrusted(value.dump(), 40), ")"));
}

TensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_begin,
                       uint64_t data_size, std::string_view context) {
  if (name.empty()) throw Error(concat(context, ": empty tensor name"));
  if (!entry.is_object()) {
    fail_tensor(context, name, concat("entry is not an object (", entry.type_name(), ")"));
  }
  for (const auto& [key, unused] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      fail_tensor(context, name, concat("unexpected key ", quote_untrusted(key)));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) fail_tensor(context, name, concat("missing \"", key, "\""));
  }

  TensorInfo info;
  info.name = name;
  const json& dtype = entry.at("dtype");
  if (!dtype.is_string()) fail_tensor(context, name, "dtype is not a string");
  const auto parsed_dtype = dtype_from_name(dtype.get_ref<const std::string&>());
  if (!parsed_dtype) {
    fail_tensor(context, name,
                concat("unsupported dtype ", quote_untrusted(dtype.get_ref<const std::string&>()),
                       " (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)"));
  }
  info.dtype = *parsed_dtype;

  const json& shape = entry.at("shape");
  if (!shape.is_array()) fail_tensor(context, name, "shape is not an array");
  info.shape.reserve(shape.size());
  for (const json& dim : shape) {
    const uint64_t d = read_unsigned(dim, context, name, "shape dimension");
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail_tensor(context, name, concat("shape dimension ", d, " is too large"));
    }
    info.shape.push_back(static_cast<int64_t>(d));
  }
  int64_t numel = 1;
  for (const int64_t d : info.shape) {
    if (__builtin_mul_overflow(numel, d, &numel)) {
      fail_tensor(context, name, concat("shape ", format_shape(info.shape), " overflows int64"));
    }
  }
  info.numel = numel;
  int64_t byte_size = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(info.dtype)), &byte_size)) {
    fail_tensor(context, name,
                concat("byte size of shape ", format_shape(info.shape), " x ",
                       dtype_name(info.dtype), " overflows int64"));
  }
  info.byte_size = static_cast<uint64_t>(byte_size);

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    fail_tensor(context, name, "data_offsets is not an array [begin, end]");
  }
  const uint64_t begin = read_unsigned(offsets[0], context, name, "data_offsets begin");
  const uint64_t end = read_unsigned(offsets[1], context, name, "data_offsets end");
  if (begin > end) {
    fail_tensor(context, name, concat("data_offsets [", begin, ", ", end, "] has begin > end"));
  }
  if (end > data_size) {
    fail_tensor(context, name,
                concat("data_offsets [", begin, ", ", end, "] out of bounds: the data buffer has ",
                       data_size, " bytes"));
  }
  if (end - begin != info.byte_size) {
    fail_tensor(context, name,
                concat("data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes but ",
                       dtype_name(info.dtype), " ", format_shape(info.shape), " needs ",
                       info.byte_size, " bytes (shape/byte size mismatch)"));
  }
  info.data_offset = data_begin + begin;
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& value, std::string_view context) {
  if (!value.is_object()) {
    throw Error(concat(context, ": __metadata__ is not an object (", value.type_name(), ")"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw Error(concat(context, ": __metadata__ value of key ", quote_untrusted(key),
                         " is not a string (", item.type_name(), ")"));
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

}  // namespace

std::string format_shape(std::span<const int64_t> shape) {
  constexpr size_t kMaxShown = 8;
  std::string out = "[";
  for (size_t i = 0; i < shape.size() && i < kMaxShown; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() > kMaxShown) out += concat(", ... (", shape.size(), " dims)");
  out += "]";
  return out;
}

int64_t checked_numel(std::span<const int64_t> shape, std::string_view context) {
  int64_t numel = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw Error(concat(context, ": negative dimension in shape ", format_shape(shape)));
    if (__builtin_mul_overflow(numel, d, &numel)) {
      throw Error(concat(context, ": shape ", format_shape(shape), " overflows int64"));
    }
  }
  return numel;
}

ParsedSafetensors parse_safetensors(std::span<const std::byte> file, std::string_view context) {
  const uint64_t file_size = file.size();
  if (file_size < 8) {
    throw Error(concat(context, ": file is truncated: ", file_size,
                       " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), sizeof(header_size));
  if (header_size > kSafetensorsMaxHeaderSize) {
    throw Error(concat(context, ": header length ", header_size, " exceeds the limit of ",
                       kSafetensorsMaxHeaderSize, " bytes"));
  }
  if (header_size > file_size - 8) {
    throw Error(concat(context, ": header length ", header_size, " runs past the end of the file (",
                       file_size, " bytes)"));
  }
  const std::string_view header(reinterpret_cast<const char*>(file.data()) + 8, header_size);
  if (header.empty() || header.front() != '{') {
    throw Error(concat(
        context, ": header does not start with '{' (",
        header.empty() ? std::string("empty header") : quote_untrusted(header.substr(0, 16)), ")"));
  }
  const json root = parse_strict_json(header, concat(context, ": header"), kHeaderJsonLimits);
  if (!root.is_object()) {
    throw Error(concat(context, ": header is not a JSON object (", root.type_name(), ")"));
  }

  ParsedSafetensors parsed;
  parsed.header_size = header_size;
  const uint64_t data_begin = 8 + header_size;
  const uint64_t data_size = file_size - data_begin;
  parsed.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      parsed.metadata = parse_metadata(entry, context);
    } else {
      parsed.tensors.push_back(parse_entry(name, entry, data_begin, data_size, context));
    }
  }

  // The tensors must tile [0, data_size) exactly: sorted by begin, each starts where the previous
  // one ended, and the last ends at the end of the file.
  std::sort(parsed.tensors.begin(), parsed.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.data_offset, a.byte_size, a.name) <
                     std::tie(b.data_offset, b.byte_size, b.name);
            });
  uint64_t expected = data_begin;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : parsed.tensors) {
    if (info.data_offset != expected) {
      const uint64_t begin = info.data_offset - data_begin;
      const uint64_t prev_end = expected - data_begin;
      const std::string prev = previous ? concat("tensor ", quote_untrusted(previous->name))
                                        : std::string("the start of the data buffer");
      if (info.data_offset < expected) {
        fail_tensor(
            context, info.name,
            concat("data_offsets begin ", begin, " overlaps ", prev, " (ends at ", prev_end, ")"));
      }
      fail_tensor(context, info.name,
                  concat("gap of ", begin - prev_end, " bytes between ", prev, " (ends at ",
                         prev_end, ") and this tensor (begins at ", begin, ")"));
    }
    expected = info.data_offset + info.byte_size;
    previous = &info;
  }
  if (expected != file_size) {
    throw Error(concat(context, ": ", file_size - expected,
                       " trailing bytes after the last tensor (data buffer has ", data_size,
                       " bytes, tensors cover ", expected - data_begin, ")"));
  }
  return parsed;
}

SafetensorsLayout plan_safetensors(const std::vector<TensorSpec>& specs,
                                   const std::map<std::string, std::string>& metadata,
                                   std::string_view context) {
  SafetensorsLayout layout;
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t cursor = 0;  // relative to the data buffer
  for (const TensorSpec& spec : specs) {
    if (spec.name.empty()) throw Error(concat(context, ": empty tensor name"));
    if (spec.name == kMetadataKey) {
      throw Error(concat(context, ": \"__metadata__\" is reserved and cannot name a tensor"));
    }
    if (!names.insert(spec.name).second) {
      throw Error(concat(context, ": duplicate tensor name ", quote_untrusted(spec.name)));
    }
    const int64_t numel =
        checked_numel(spec.shape, concat(context, ": tensor ", quote_untrusted(spec.name)));
    const int64_t bytes = mul_checked(numel, dtype_size(spec.dtype), "tensor byte size");
    const uint64_t end = static_cast<uint64_t>(
        add_checked(static_cast<int64_t>(cursor), bytes, "safetensors data size"));
    header[spec.name] = json{{"dtype", std::string(dtype_name(spec.dtype))},
                             {"shape", spec.shape},
                             {"data_offsets", {cursor, end}}};
    layout.offsets.push_back(cursor);
    layout.sizes.push_back(static_cast<uint64_t>(bytes));
    cursor = end;
  }
  std::string text;
  try {
    text = header.dump();  // strict UTF-8: throws on invalid names or metadata
  } catch (const json::exception& ex) {
    throw Error(concat(context, ": tensor names and metadata must be valid UTF-8 (",
                       quote_untrusted(ex.what(), 160), ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kSafetensorsMaxHeaderSize) {
    throw Error(concat(context, ": header would be ", text.size(), " bytes, over the limit of ",
                       kSafetensorsMaxHeaderSize));
  }
  const uint64_t header_size = text.size();
  const uint64_t data_begin = 8 + header_size;
  layout.prefix.resize(8);
  std::memcpy(layout.prefix.data(), &header_size, 8);
  layout.prefix += text;
  for (uint64_t& offset : layout.offsets) offset += data_begin;
  layout.file_size = static_cast<uint64_t>(add_checked(
      static_cast<int64_t>(data_begin), static_cast<int64_t>(cursor), "safetensors file size"));
  return layout;
}

}  // namespace nms::detail
