#include "nmsparse/io/nm_tensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

constexpr std::string_view kMetaPrefix = "nmsparse.";
constexpr std::string_view kFormatName = "nmsparse-nm";
constexpr int kFormatVersion = 1;

using Json = nlohmann::json;

int64_t json_int(const Json& j, const char* key, std::string_view name) {
  const auto it = j.find(key);
  NMS_CHECK(it != j.end() && it->is_number_integer(), "packed tensor '", name, "': metadata key '",
            key, "' is missing or not an integer");
  return it->get<int64_t>();
}

std::string json_string(const Json& j, const char* key, std::string_view name) {
  const auto it = j.find(key);
  NMS_CHECK(it != j.end() && it->is_string(), "packed tensor '", name, "': metadata key '", key,
            "' is missing or not a string");
  return it->get<std::string>();
}

std::vector<int64_t> json_shape(const Json& j, const char* key, std::string_view name) {
  const auto it = j.find(key);
  NMS_CHECK(it != j.end() && it->is_array() && it->size() <= 16, "packed tensor '", name,
            "': metadata key '", key, "' is missing or not a shape array");
  std::vector<int64_t> shape;
  for (const auto& d : *it) {
    NMS_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "packed tensor '", name,
              "': metadata '", key, "' has a dimension that is not a non-negative integer");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

const TensorInfo& part(const SafetensorsFile& file, const std::string& name, const char* suffix) {
  const TensorInfo* t = file.find(name + suffix);
  NMS_CHECK(t != nullptr, "packed tensor '", name, "' is described in the metadata but '", name,
            suffix, "' is missing from ", file.path().string());
  return *t;
}

}  // namespace

std::string packed_nm_metadata_key(std::string_view name) {
  return std::string(kMetaPrefix) + std::string(name);
}

std::string packed_nm_metadata_json(const PackedNmMeta& meta) {
  Json j;
  j["format"] = kFormatName;
  j["version"] = kFormatVersion;
  j["n"] = meta.pattern.n;
  j["m"] = meta.pattern.m;
  j["axis"] = axis_name(meta.axis);
  j["shape"] = {meta.rows, meta.cols};
  j["index_bits"] = meta.pattern.index_bits();
  j["dtype"] = dtype_name(meta.dtype);
  j["tensor_shape"] = meta.tensor_shape;
  j["layout"] = layout_name(meta.layout);
  return j.dump();
}

PackedNmMeta parse_packed_nm_metadata(std::string_view text, std::string_view name) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  NMS_CHECK(!j.is_discarded() && j.is_object(), "packed tensor '", name,
            "': metadata is not a JSON object");
  NMS_CHECK(json_string(j, "format", name) == kFormatName, "packed tensor '", name,
            "': unknown format '", json_string(j, "format", name), "' (expected ", kFormatName,
            ")");
  const int64_t version = json_int(j, "version", name);
  NMS_CHECK(version == kFormatVersion, "packed tensor '", name, "': format version ", version,
            " is not supported (this build reads version ", kFormatVersion, ")");
  PackedNmMeta meta;
  const int64_t n = json_int(j, "n", name);
  const int64_t m = json_int(j, "m", name);
  NMS_CHECK(n >= 1 && m >= 1 && n <= kMaxGroupSize && m <= kMaxGroupSize, "packed tensor '", name,
            "': pattern ", n, ":", m, " is out of range");
  meta.pattern = NmPattern::make(static_cast<int>(n), static_cast<int>(m));
  const auto axis = axis_from_name(json_string(j, "axis", name));
  NMS_CHECK(axis.has_value(), "packed tensor '", name, "': axis must be 'rows' or 'cols'");
  meta.axis = *axis;
  const std::vector<int64_t> shape = json_shape(j, "shape", name);
  NMS_CHECK(shape.size() == 2, "packed tensor '", name, "': shape must have 2 dimensions");
  meta.rows = shape[0];
  meta.cols = shape[1];
  detail::mul_checked(meta.rows, meta.cols, "packed matrix size");
  const int64_t bits = json_int(j, "index_bits", name);
  NMS_CHECK(bits == meta.pattern.index_bits(), "packed tensor '", name, "': index_bits ", bits,
            " does not match m = ", m, " (expected ", meta.pattern.index_bits(), ")");
  const auto dtype = dtype_from_name(json_string(j, "dtype", name));
  NMS_CHECK(dtype && dtype_is_float(*dtype), "packed tensor '", name,
            "': values dtype must be F32, F16, BF16 or F64");
  meta.dtype = *dtype;
  meta.tensor_shape = json_shape(j, "tensor_shape", name);
  const auto layout = layout_from_name(json_string(j, "layout", name));
  NMS_CHECK(layout.has_value(), "packed tensor '", name, "': unknown layout");
  meta.layout = *layout;
  const auto ms = tensor_matrix_shape(meta.tensor_shape);
  NMS_CHECK(ms && ms->layout == meta.layout && ms->rows == meta.rows && ms->cols == meta.cols,
            "packed tensor '", name, "': tensor_shape does not map to the ", meta.rows, " x ",
            meta.cols, " matrix with layout ", layout_name(meta.layout));
  const int64_t axis_len = meta.axis == NmAxis::kRows ? meta.cols : meta.rows;
  NMS_CHECK(axis_len % m == 0, "packed tensor '", name, "': the grouped dimension (", axis_len,
            ") is not a multiple of m (", m, ")");
  return meta;
}

std::vector<TensorSpec> packed_nm_specs(std::string_view name, const PackedNmMeta& meta) {
  CompressedNm shape_only;  // buffers stay empty; only the size queries are used
  shape_only.rows = meta.rows;
  shape_only.cols = meta.cols;
  shape_only.pattern = meta.pattern;
  shape_only.axis = meta.axis;
  return {{std::string(name) + ".values",
           meta.dtype,
           {shape_only.value_rows(), shape_only.value_cols()}},
          {std::string(name) + ".indices", DType::kU8, {shape_only.index_bytes()}}};
}

void write_packed_nm(SafetensorsWriter& writer, std::string_view name, const PackedNmMeta& meta,
                     const CompressedNm& c) {
  NMS_CHECK(c.rows == meta.rows && c.cols == meta.cols && c.pattern == meta.pattern &&
                c.axis == meta.axis,
            "compressed tensor '", name, "' does not match its metadata");
  const std::string base(name);
  writer.write_f32(base + ".values",
                   std::span<const float>(c.values.data(), static_cast<size_t>(c.values.size())));
  writer.write(base + ".indices", std::as_bytes(std::span<const uint8_t>(
                                      c.indices.data(), static_cast<size_t>(c.indices.size()))));
}

std::vector<PackedNmEntry> find_packed_nm(const SafetensorsFile& file) {
  std::vector<PackedNmEntry> out;
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind(kMetaPrefix, 0) != 0) continue;
    const std::string name = key.substr(kMetaPrefix.size());
    // Other tools' annotations share the prefix (e.g. "nmsparse.train.config" of training
    // checkpoints): a key describes a packed tensor when the file has one of its two parts.
    if (file.find(name + ".values") == nullptr && file.find(name + ".indices") == nullptr) continue;
    PackedNmEntry e;
    e.name = name;
    e.meta = parse_packed_nm_metadata(value, name);
    e.values = &part(file, name, ".values");
    e.indices = &part(file, name, ".indices");
    const std::vector<TensorSpec> want = packed_nm_specs(name, e.meta);
    NMS_CHECK(e.values->dtype == want[0].dtype && e.values->shape == want[0].shape,
              "packed tensor '", name, "': '", name, ".values' has dtype ",
              dtype_name(e.values->dtype), " and ", e.values->shape.size(),
              "-D shape that do not match the metadata (expected ", dtype_name(want[0].dtype), " [",
              want[0].shape[0], ", ", want[0].shape[1], "])");
    NMS_CHECK(e.indices->dtype == DType::kU8 && e.indices->shape == want[1].shape,
              "packed tensor '", name, "': '", name, ".indices' must be U8 [", want[1].shape[0],
              "]");
    out.push_back(std::move(e));
  }
  return out;
}

CompressedNm read_packed_nm(const SafetensorsFile& file, const PackedNmEntry& e) {
  CompressedNm c;
  c.rows = e.meta.rows;
  c.cols = e.meta.cols;
  c.pattern = e.meta.pattern;
  c.axis = e.meta.axis;
  c.values.resize(c.value_rows() * c.value_cols());
  file.read_f32_into(*e.values,
                     std::span<float>(c.values.data(), static_cast<size_t>(c.values.size())));
  c.indices.resize(c.index_bytes());
  const auto raw = file.raw(*e.indices);
  NMS_CHECK(static_cast<int64_t>(raw.size()) == c.indices.size(), "packed tensor '", e.name,
            "': index stream has ", raw.size(), " bytes, expected ", c.indices.size());
  if (!raw.empty()) std::memcpy(c.indices.data(), raw.data(), raw.size());
  nm_validate(c);
  return c;
}

}  // namespace nms

namespace nms {
namespace {

constexpr std::string_view kCompressed = ".compressed";
constexpr std::string_view kBitmask = ".bitmask";
constexpr std::string_view kShape = ".shape";

// The dense shape stored in `<name>.shape`: 2 integers (I64 or I32), shaped [2, 1] or [2].
std::pair<int64_t, int64_t> read_shape_tensor(const SafetensorsFile& file, const TensorInfo& t,
                                              std::string_view name) {
  NMS_CHECK((t.dtype == DType::kI64 || t.dtype == DType::kI32) && t.numel == 2,
            "sparse-24-bitmask tensor '", name, "': '", t.name,
            "' must hold 2 integers (I64 or I32), not ", t.numel, " of ", dtype_name(t.dtype));
  const auto raw = file.raw(t);
  int64_t dims[2];
  for (int k = 0; k < 2; ++k) {
    if (t.dtype == DType::kI64) {
      std::memcpy(&dims[k], raw.data() + 8 * k, 8);
    } else {
      int32_t v = 0;
      std::memcpy(&v, raw.data() + 4 * k, 4);
      dims[k] = v;
    }
    NMS_CHECK(dims[k] >= 0, "sparse-24-bitmask tensor '", name, "': negative dimension ", dims[k]);
  }
  return {dims[0], dims[1]};
}

// Reads the dense shape into `e` and checks the parts' dtypes and sizes against it.
void check_sparse24_parts(const SafetensorsFile& file, Sparse24Entry& e) {
  const auto [rows, cols] = read_shape_tensor(file, *e.shape, e.name);
  e.rows = rows;
  e.cols = cols;
  NMS_CHECK(cols % 2 == 0, "sparse-24-bitmask tensor '", e.name, "': cols (", cols, ") is odd");
  const int64_t value_count = detail::mul_checked(rows, cols / 2, "compressed size");
  const int64_t mask_bytes = detail::mul_checked(rows, (cols + 7) / 8, "bitmask size");
  NMS_CHECK(dtype_is_float(e.compressed->dtype) && e.compressed->numel == value_count,
            "sparse-24-bitmask tensor '", e.name, "': '", e.compressed->name, "' must hold ",
            value_count, " float values for shape [", rows, ", ", cols, "], not ",
            e.compressed->numel, " of ", dtype_name(e.compressed->dtype));
  NMS_CHECK((e.bitmask->dtype == DType::kU8 || e.bitmask->dtype == DType::kI8 ||
             e.bitmask->dtype == DType::kBool) &&
                e.bitmask->numel == mask_bytes,
            "sparse-24-bitmask tensor '", e.name, "': '", e.bitmask->name, "' must hold ",
            mask_bytes, " bytes for shape [", rows, ", ", cols, "]");
}

}  // namespace

std::vector<Sparse24Entry> find_sparse24(const SafetensorsFile& file) {
  std::vector<Sparse24Entry> out;
  auto strip = [](const std::string& n, std::string_view suffix) -> std::optional<std::string> {
    if (n.size() > suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return n.substr(0, n.size() - suffix.size());
    }
    return std::nullopt;
  };
  for (const TensorInfo& t : file.tensors()) {
    const auto base = strip(t.name, kCompressed);
    if (!base) continue;
    Sparse24Entry e;
    e.name = *base;
    e.compressed = &t;
    e.bitmask = file.find(*base + std::string(kBitmask));
    e.shape = file.find(*base + std::string(kShape));
    NMS_CHECK(e.bitmask != nullptr && e.shape != nullptr, "sparse-24-bitmask tensor '", *base,
              "' has '", t.name, "' but lacks '", *base, e.bitmask ? kShape : kBitmask, "' in ",
              file.path().string());
    check_sparse24_parts(file, e);
    out.push_back(e);
  }
  // A lone .bitmask next to a .shape with no .compressed is a broken triple too.
  for (const TensorInfo& t : file.tensors()) {
    const auto base = strip(t.name, kBitmask);
    if (base && file.find(*base + std::string(kShape)) != nullptr) {
      NMS_CHECK(file.find(*base + std::string(kCompressed)) != nullptr,
                "sparse-24-bitmask tensor '", *base, "' lacks '", *base, kCompressed, "'");
    }
  }
  return out;
}

Sparse24Bitmask read_sparse24(const SafetensorsFile& file, const Sparse24Entry& e) {
  Sparse24Bitmask s;
  s.rows = e.rows;
  s.cols = e.cols;
  s.compressed = file.read_f32(*e.compressed);
  const auto raw = file.raw(*e.bitmask);
  s.bitmask.resize(raw.size());
  if (!raw.empty()) std::memcpy(s.bitmask.data(), raw.data(), raw.size());
  return s;
}

std::vector<TensorSpec> sparse24_specs(std::string_view name, int64_t rows, int64_t cols,
                                       DType values_dtype) {
  const std::string base(name);
  return {{base + std::string(kCompressed), values_dtype, {rows, cols / 2}},
          {base + std::string(kBitmask), DType::kU8, {rows, (cols + 7) / 8}},
          {base + std::string(kShape), DType::kI64, {2, 1}}};
}

void write_sparse24(SafetensorsWriter& writer, std::string_view name, const Sparse24Bitmask& s) {
  const std::string base(name);
  writer.write_f32(base + std::string(kCompressed), s.compressed);
  writer.write(base + std::string(kBitmask), std::as_bytes(std::span<const uint8_t>(s.bitmask)));
  const int64_t dims[2] = {s.rows, s.cols};
  writer.write(base + std::string(kShape), std::as_bytes(std::span<const int64_t>(dims)));
}

}  // namespace nms
