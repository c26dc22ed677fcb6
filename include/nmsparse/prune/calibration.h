// Calibration statistics: what the post-training pruners need to know about the inputs of each
// linear layer y = W x + b (W [out, in]), gathered over `samples` input rows x ∈ R^in (tokens:
// batch × sequence positions flattened). Layout on disk: docs/calibration.md.
//
//   hessian    H = Σ_s x_s x_sᵀ   [in, in], symmetric positive semi-definite. The *sum*, not the
//              mean, so that statistics of several passes add up; pruners divide by `samples`.
//              Optional in a file (Wanda and magnitude do not need it).
//   act_norm   ‖X_j‖₂ = sqrt(Σ_s x_sj²)   [in]. Equals sqrt(diag H) when both are present; the
//              reader checks that (relative tolerance 1e-3 on the squares, plus 1e-6 of the
//              largest diagonal, so rounding to float32 passes and a mismatched pair does not).
//   input_sum  Σ_s x_s   [in]. Optional; with it AdaPrune also retunes the bias, and the
//              reconstruction error counts the bias.
//
// File: a safetensors file with metadata "nmsparse.calibration" = "1" and, per layer L (the layer
// whose weight tensor is "L.weight", or "L" itself for a bare matrix), the tensors
//   "L.hessian" F32|F64 [in, in],  "L.act_norm" F32|F64 [in],  "L.samples" I64 [] or [1],
//   "L.input_sum" F32|F64 [in] (optional).
// A layer needs act_norm and samples; hessian and input_sum are optional. Anything else in the file
// (a tensor with another suffix, a dtype or shape that does not fit, a non-finite value, a negative
// norm or diagonal, an asymmetric H, samples < 1) is an nms::Error naming the tensor and the value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nmsparse/io/safetensors.h"

namespace nms {

struct LayerCalibration {
  std::string name;
  int64_t in = 0;
  int64_t samples = 0;
  std::vector<double> act_norm;   // [in]
  std::vector<double> hessian;    // [in * in] row-major, or empty
  std::vector<double> input_sum;  // [in], or empty

  bool has_hessian() const { return !hessian.empty(); }
  bool has_input_sum() const { return !input_sum.empty(); }
  // Throws nms::Error (naming the layer and the value) unless the fields are consistent as the
  // file comment requires.
  void validate() const;
};

// Streams one layer at a time out of a calibration file (memory: the mapped file's touched pages
// plus the layer asked for). open() validates the whole header and the set of tensors; values are
// checked when a layer is read.
class CalibrationFile {
 public:
  static CalibrationFile open(const std::filesystem::path& path);
  // As open() on a copy of `bytes` (the fuzzer's and tests' entry point).
  static CalibrationFile from_bytes(std::span<const uint8_t> bytes, std::string label = "<memory>");

  const std::vector<std::string>& layers() const { return layers_; }  // sorted
  bool contains(std::string_view layer) const;
  // Reads and validates one layer; throws for an unknown name (listing a few known ones).
  LayerCalibration read(std::string_view layer) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  CalibrationFile(SafetensorsFile file, std::filesystem::path path);
  static CalibrationFile validate(SafetensorsFile file, const std::filesystem::path& path);
  SafetensorsFile file_;
  std::filesystem::path path_;
  std::vector<std::string> layers_;
};

// Writes the layers atomically (temporary file + rename), hessian as F32 by default or F64.
// Every layer is validated first, so nothing is written for bad input.
enum class CalibrationPrecision { kF32, kF64 };
void write_calibration(const std::filesystem::path& path,
                       const std::vector<LayerCalibration>& layers,
                       CalibrationPrecision precision = CalibrationPrecision::kF32,
                       const std::map<std::string, std::string>& metadata = {});

// The calibration layer name of a weight tensor: "x.weight" -> "x", anything else -> itself.
std::string calibration_layer_of(std::string_view weight_name);

// Accumulates the statistics of one layer from row-major float batches [rows, in] (double sums).
class CalibrationAccumulator {
 public:
  CalibrationAccumulator(std::string name, int64_t in, bool with_hessian = true);
  void add(const float* x, int64_t rows);  // x: rows × in, row-major
  LayerCalibration finish() const;         // throws when no sample was added

 private:
  LayerCalibration layer_;
  std::vector<double> sum_squares_;
};

}  // namespace nms
