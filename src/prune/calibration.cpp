// Calibration files (include/nmsparse/prune/calibration.h; layout in docs/calibration.md).
#include "nmsparse/prune/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <span>

#include "nmsparse/core/error.h"

namespace nms {
namespace {

constexpr const char* kFormatKey = "nmsparse.calibration";
constexpr const char* kFormatVersion = "1";
constexpr std::string_view kSuffixes[] = {".hessian", ".act_norm", ".samples", ".input_sum"};

// Splits "L.suffix" into L and the suffix (one of kSuffixes); nullopt for anything else.
std::optional<std::pair<std::string, std::string_view>> split_name(std::string_view name) {
  for (std::string_view suffix : kSuffixes) {
    if (name.size() > suffix.size() && name.ends_with(suffix))
      return std::make_pair(std::string(name.substr(0, name.size() - suffix.size())), suffix);
  }
  return std::nullopt;
}

std::vector<double> read_doubles(const SafetensorsFile& file, const TensorInfo& info) {
  std::vector<double> out(static_cast<size_t>(info.numel));
  if (info.dtype == DType::kF64) {
    std::memcpy(out.data(), file.raw(info).data(), out.size() * sizeof(double));
  } else {
    const std::vector<float> f = file.read_f32(info);
    std::copy(f.begin(), f.end(), out.begin());
  }
  file.release(info);
  for (size_t k = 0; k < out.size(); ++k)
    NMS_CHECK(std::isfinite(out[k]), file.path().string(), ": tensor '", info.name,
              "' has a non-finite value (", out[k], ") at element ", k);
  return out;
}

void check_float_dtype(const TensorInfo& info, const std::filesystem::path& path) {
  NMS_CHECK(info.dtype == DType::kF32 || info.dtype == DType::kF64, path.string(), ": tensor '",
            info.name, "' has dtype ", dtype_name(info.dtype),
            " (calibration tensors are F32 or F64)");
}

std::vector<std::byte> to_bytes(std::span<const double> values, CalibrationPrecision precision) {
  std::vector<std::byte> bytes;
  if (precision == CalibrationPrecision::kF64) {
    bytes.resize(values.size() * sizeof(double));
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    bytes.resize(values.size() * sizeof(float));
    for (size_t k = 0; k < values.size(); ++k) {
      const auto f = static_cast<float>(values[k]);
      std::memcpy(bytes.data() + k * sizeof(float), &f, sizeof(float));
    }
  }
  return bytes;
}

}  // namespace

void LayerCalibration::validate() const {
  NMS_CHECK(!name.empty(), "a calibration layer has an empty name");
  NMS_CHECK(in >= 1, "calibration layer '", name, "': in (", in, ") must be >= 1");
  NMS_CHECK(samples >= 1, "calibration layer '", name, "': samples (", samples, ") must be >= 1");
  NMS_CHECK(static_cast<int64_t>(act_norm.size()) == in, "calibration layer '", name,
            "': act_norm has ", act_norm.size(), " values, in is ", in);
  for (int64_t j = 0; j < in; ++j)
    NMS_CHECK(std::isfinite(act_norm[j]) && act_norm[j] >= 0.0, "calibration layer '", name,
              "': act_norm[", j, "] = ", act_norm[j], " (norms are finite and >= 0)");
  NMS_CHECK(input_sum.empty() || static_cast<int64_t>(input_sum.size()) == in,
            "calibration layer '", name, "': input_sum has ", input_sum.size(), " values, in is ",
            in);
  for (size_t j = 0; j < input_sum.size(); ++j)
    NMS_CHECK(std::isfinite(input_sum[j]), "calibration layer '", name, "': input_sum[", j,
              "] = ", input_sum[j]);
  if (hessian.empty()) return;
  NMS_CHECK(static_cast<int64_t>(hessian.size()) == in * in, "calibration layer '", name,
            "': hessian has ", hessian.size(), " values, expected in*in = ", in * in);
  double max_diag = 0.0;
  for (int64_t j = 0; j < in; ++j) {
    const double d = hessian[j * in + j];
    NMS_CHECK(std::isfinite(d) && d >= 0.0, "calibration layer '", name, "': hessian[", j, ", ", j,
              "] = ", d, " (a Gram matrix has a non-negative diagonal)");
    max_diag = std::max(max_diag, d);
  }
  // Symmetry and |H_ij| <= sqrt(H_ii H_jj) (every PSD matrix satisfies both), with float32 slack.
  const double slack = 1e-5 * max_diag;
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      const double a = hessian[i * in + j];
      const double b = hessian[j * in + i];
      NMS_CHECK(std::isfinite(a) && std::isfinite(b), "calibration layer '", name,
                "': hessian has a non-finite value at (", i, ", ", j, ")");
      NMS_CHECK(std::fabs(a - b) <= 1e-5 * (std::fabs(a) + std::fabs(b)) + slack,
                "calibration layer '", name, "': hessian is not symmetric: H[", i, ", ", j,
                "] = ", a, " but H[", j, ", ", i, "] = ", b);
      const double bound = std::sqrt(hessian[i * in + i] * hessian[j * in + j]);
      NMS_CHECK(std::fabs(a) <= bound * (1 + 1e-4) + slack, "calibration layer '", name,
                "': hessian is not positive semi-definite: |H[", i, ", ", j, "]| = ", std::fabs(a),
                " exceeds sqrt(H[", i, ", ", i, "] H[", j, ", ", j, "]) = ", bound);
    }
  }
  for (int64_t j = 0; j < in; ++j) {
    const double sq = act_norm[j] * act_norm[j];
    const double d = hessian[j * in + j];
    NMS_CHECK(std::fabs(sq - d) <= 1e-3 * std::max(sq, d) + 1e-6 * max_diag, "calibration layer '",
              name, "': act_norm[", j, "]^2 = ", sq, " does not match hessian[", j, ", ", j,
              "] = ", d, " (both are the sum of x_j^2 over the samples)");
  }
}

CalibrationFile::CalibrationFile(SafetensorsFile file, std::filesystem::path path)
    : file_(std::move(file)), path_(std::move(path)) {}

CalibrationFile CalibrationFile::open(const std::filesystem::path& path) {
  return validate(SafetensorsFile::open(path), path);
}

CalibrationFile CalibrationFile::from_bytes(std::span<const uint8_t> bytes, std::string label) {
  std::filesystem::path path(label);
  return validate(SafetensorsFile::from_bytes(bytes, std::move(label)), path);
}

CalibrationFile CalibrationFile::validate(SafetensorsFile file, const std::filesystem::path& path) {
  const auto version = file.metadata().find(kFormatKey);
  NMS_CHECK(version != file.metadata().end(), path.string(),
            ": not a calibration file (no metadata '", kFormatKey,
            "'; produce one with `nmsparse calibrate` or examples/calibrate_torch.py)");
  NMS_CHECK(version->second == kFormatVersion, path.string(), ": calibration format version '",
            version->second, "' (this nmsparse reads version ", kFormatVersion, ")");
  std::set<std::string> layers;
  for (const TensorInfo& info : file.tensors()) {
    const auto split = split_name(info.name);
    NMS_CHECK(split.has_value(), path.string(), ": tensor '", info.name,
              "' is not a calibration tensor (names end in .hessian, .act_norm, .samples or "
              ".input_sum)");
    layers.insert(split->first);
  }
  NMS_CHECK(!layers.empty(), path.string(), ": the calibration file holds no layer");
  CalibrationFile out(std::move(file), path);
  for (const std::string& layer : layers) {
    for (const char* required : {".act_norm", ".samples"})
      NMS_CHECK(out.file_.find(layer + required) != nullptr, path.string(), ": layer '", layer,
                "' has no tensor '", layer, required, "'");
    const TensorInfo& norm = out.file_.at(layer + ".act_norm");
    check_float_dtype(norm, path);
    NMS_CHECK(norm.shape.size() == 1 && norm.shape[0] >= 1, path.string(), ": tensor '", norm.name,
              "' must be 1-D [in] with in >= 1");
    const int64_t in = norm.shape[0];
    const TensorInfo& samples = out.file_.at(layer + ".samples");
    NMS_CHECK(samples.dtype == DType::kI64 && samples.numel == 1 && samples.shape.size() <= 1,
              path.string(), ": tensor '", samples.name, "' must be I64 of shape [] or [1]");
    if (const TensorInfo* h = out.file_.find(layer + ".hessian")) {
      check_float_dtype(*h, path);
      NMS_CHECK(h->shape == std::vector<int64_t>({in, in}), path.string(), ": tensor '", h->name,
                "' must be [", in, ", ", in, "] (act_norm has ", in, " features)");
    }
    if (const TensorInfo* s = out.file_.find(layer + ".input_sum")) {
      check_float_dtype(*s, path);
      NMS_CHECK(s->shape == std::vector<int64_t>({in}), path.string(), ": tensor '", s->name,
                "' must be [", in, "]");
    }
  }
  out.layers_.assign(layers.begin(), layers.end());
  return out;
}

bool CalibrationFile::contains(std::string_view layer) const {
  return std::binary_search(layers_.begin(), layers_.end(), layer);
}

LayerCalibration CalibrationFile::read(std::string_view layer) const {
  if (!contains(layer)) {
    std::string known;
    for (size_t k = 0; k < layers_.size() && k < 5; ++k) known += (k ? ", " : "") + layers_[k];
    if (layers_.size() > 5) known += ", ...";
    NMS_THROW(path_.string(), ": no calibration for layer '", layer, "' (the file has ",
              layers_.size(), " layers: ", known, ")");
  }
  const std::string name(layer);
  LayerCalibration out;
  out.name = name;
  out.act_norm = read_doubles(file_, file_.at(name + ".act_norm"));
  out.in = static_cast<int64_t>(out.act_norm.size());
  int64_t samples = 0;
  std::memcpy(&samples, file_.raw(file_.at(name + ".samples")).data(), sizeof(samples));
  out.samples = samples;
  if (const TensorInfo* h = file_.find(name + ".hessian")) out.hessian = read_doubles(file_, *h);
  if (const TensorInfo* s = file_.find(name + ".input_sum"))
    out.input_sum = read_doubles(file_, *s);
  try {
    out.validate();
  } catch (const Error& e) {
    NMS_THROW(path_.string(), ": ", e.what());
  }
  return out;
}

void write_calibration(const std::filesystem::path& path,
                       const std::vector<LayerCalibration>& layers, CalibrationPrecision precision,
                       const std::map<std::string, std::string>& metadata) {
  NMS_CHECK(!layers.empty(), "write_calibration: no layer to write to ", path.string());
  std::set<std::string> names;
  for (const LayerCalibration& layer : layers) {
    layer.validate();
    NMS_CHECK(names.insert(layer.name).second, "write_calibration: layer '", layer.name,
              "' appears twice");
  }
  const DType dtype = precision == CalibrationPrecision::kF64 ? DType::kF64 : DType::kF32;
  std::vector<TensorData> tensors;
  for (const LayerCalibration& layer : layers) {
    if (layer.has_hessian())
      tensors.push_back({{layer.name + ".hessian", dtype, {layer.in, layer.in}},
                         to_bytes(layer.hessian, precision)});
    tensors.push_back(
        {{layer.name + ".act_norm", dtype, {layer.in}}, to_bytes(layer.act_norm, precision)});
    if (layer.has_input_sum())
      tensors.push_back(
          {{layer.name + ".input_sum", dtype, {layer.in}}, to_bytes(layer.input_sum, precision)});
    std::vector<std::byte> samples(sizeof(int64_t));
    std::memcpy(samples.data(), &layer.samples, sizeof(int64_t));
    tensors.push_back({{layer.name + ".samples", DType::kI64, {}}, std::move(samples)});
  }
  std::map<std::string, std::string> meta = metadata;
  meta.insert_or_assign(std::string(kFormatKey), std::string(kFormatVersion));
  write_safetensors(path, tensors, meta);
}

std::string calibration_layer_of(std::string_view weight_name) {
  constexpr std::string_view kWeight = ".weight";
  if (weight_name.size() > kWeight.size() && weight_name.ends_with(kWeight))
    return std::string(weight_name.substr(0, weight_name.size() - kWeight.size()));
  return std::string(weight_name);
}

CalibrationAccumulator::CalibrationAccumulator(std::string name, int64_t in, bool with_hessian) {
  NMS_CHECK(in >= 1, "CalibrationAccumulator: in (", in, ") must be >= 1");
  layer_.name = std::move(name);
  layer_.in = in;
  layer_.act_norm.assign(static_cast<size_t>(in), 0.0);
  layer_.input_sum.assign(static_cast<size_t>(in), 0.0);
  sum_squares_.assign(static_cast<size_t>(in), 0.0);
  if (with_hessian) layer_.hessian.assign(static_cast<size_t>(in * in), 0.0);
}

void CalibrationAccumulator::add(const float* x, int64_t rows) {
  NMS_CHECK(rows >= 0, "CalibrationAccumulator::add: rows (", rows, ") must be >= 0");
  const int64_t in = layer_.in;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    for (int64_t j = 0; j < in; ++j) {
      NMS_CHECK(std::isfinite(row[j]), "calibration layer '", layer_.name, "': non-finite input ",
                row[j], " at sample ", layer_.samples + r, ", feature ", j);
      const double v = row[j];
      sum_squares_[j] += v * v;
      layer_.input_sum[j] += v;
    }
  }
  if (layer_.has_hessian()) {
    // Lower triangle of Σ x xᵀ, parallel over rows of H (each thread owns its rows: no races and
    // the same sums in the same order for any thread count).
    double* h = layer_.hessian.data();
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * in;
        const double xi = row[i];
        if (xi == 0.0) continue;
        double* hi = h + i * in;
        for (int64_t j = 0; j <= i; ++j) hi[j] += xi * static_cast<double>(row[j]);
      }
    }
  }
  layer_.samples += rows;
}

LayerCalibration CalibrationAccumulator::finish() const {
  NMS_CHECK(layer_.samples >= 1, "calibration layer '", layer_.name, "' saw no input");
  LayerCalibration out = layer_;
  for (int64_t j = 0; j < out.in; ++j) out.act_norm[j] = std::sqrt(sum_squares_[j]);
  if (out.has_hessian()) {
    for (int64_t i = 0; i < out.in; ++i)
      for (int64_t j = 0; j < i; ++j) out.hessian[j * out.in + i] = out.hessian[i * out.in + j];
  }
  return out;
}

}  // namespace nms
