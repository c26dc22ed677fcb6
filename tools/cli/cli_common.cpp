#include "cli_common.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <system_error>

#include "nmsparse/core/error.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/io/dtype.h"

namespace nms::cli {

void CommonOptions::add_to(CLI::App& app, bool with_nonfinite) {
  app.add_option("--include", include,
                 "Only tensors whose name matches this regex (ECMAScript, searched; repeatable)");
  app.add_option("--exclude", exclude, "Skip tensors whose name matches this regex (repeatable)");
  app.add_option("--json", json_path,
                 "Also write a machine-readable JSON report to FILE ('-' = stdout)");
  app.add_flag("-q,--quiet", quiet, "No table, warnings or progress; errors only");
  app.add_option("--threads", threads, "Worker threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  if (with_nonfinite) {
    app.add_flag("--allow-nonfinite", allow_nonfinite,
                 "Accept NaN/Inf weights instead of failing: NaN scores as 0 (pruned before any "
                 "nonzero), +-Inf as the largest magnitude; kept values are written unchanged");
  }
}

void CommonOptions::apply_threads() const {
  if (threads > 0) set_num_threads(threads);
}

TensorSelector::TensorSelector(const CommonOptions& options) {
  auto compile = [](const std::string& text, const char* flag) {
    try {
      return std::regex(text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      NMS_THROW("invalid regex for ", flag, " '", text, "': ", e.what());
    }
  };
  for (const auto& r : options.include) include_.push_back(compile(r, "--include"));
  for (const auto& r : options.exclude) exclude_.push_back(compile(r, "--exclude"));
}

bool TensorSelector::selected(const std::string& name) const {
  bool in = include_.empty();
  for (const auto& r : include_) in = in || std::regex_search(name, r);
  if (!in) return false;
  for (const auto& r : exclude_) {
    if (std::regex_search(name, r)) return false;
  }
  return true;
}

std::string tool_annotation(const std::string& command, const NmPattern& pattern,
                            const std::string& content) {
  return nlohmann::json{{"tool", "nmsparse 0.1.0"},
                        {"command", command},
                        {"pattern", pattern.to_string()},
                        {"content", content}}
      .dump();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

std::vector<Candidate> classify(const SafetensorsModel& model, const TensorSelector& selector,
                                const NmPattern& pattern) {
  std::vector<Candidate> out;
  for (const auto& e : model.entries()) {
    Candidate c;
    c.shard = e.shard;
    c.info = e.info;
    c.selected = selector.selected(e.info->name);
    const auto& shape = e.info->shape;
    if (const auto ms = tensor_matrix_shape(shape)) {
      c.layout = ms->layout;
      c.rows = ms->rows;
      c.cols = ms->cols;
    }
    if (!c.selected) {
      out.push_back(c);
      continue;
    }
    if (!dtype_is_float(e.info->dtype)) {
      c.skip_reason =
          std::string("dtype ") + std::string(dtype_name(e.info->dtype)) + " is not a float type";
    } else if (shape.size() < 2) {
      c.skip_reason = std::to_string(shape.size()) + "-D tensor (N:M needs a matrix)";
    } else if (c.rows == 0 || c.cols == 0) {
      c.skip_reason = "empty tensor";
    } else if (c.cols % pattern.m != 0) {
      c.skip_reason = "reduction dim " + std::to_string(c.cols) + " is not a multiple of m (" +
                      std::to_string(pattern.m) + ")";
    } else {
      c.eligible = true;
    }
    out.push_back(c);
  }
  return out;
}

namespace {

std::string index_string(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? flat % shape[k] : 0;
    flat = shape[k] ? flat / shape[k] : 0;
  }
  return shape_string(idx);
}

}  // namespace

Matrix read_matrix(const SafetensorsModel& model, const Candidate& c, bool allow_nonfinite) {
  const SafetensorsFile& file = model.shard(c.shard);
  Matrix m(c.rows, c.cols);
  std::vector<float> tensor_order;
  float* dst = m.data();
  if (c.layout == MatrixLayout::kConv) {
    tensor_order.resize(static_cast<size_t>(c.info->numel));
    dst = tensor_order.data();
  }
  file.read_f32_into(*c.info, std::span<float>(dst, static_cast<size_t>(c.info->numel)));
  if (!allow_nonfinite) {
    for (int64_t k = 0; k < c.info->numel; ++k) {
      if (!std::isfinite(dst[k])) {
        NMS_THROW("tensor '", c.info->name, "' has a non-finite value (", dst[k], ") at index ",
                  index_string(k, c.info->shape),
                  "; fix the model, or pass --allow-nonfinite to accept it (see --help)");
      }
    }
  }
  file.release(*c.info);
  if (c.layout == MatrixLayout::kConv) tensor_to_matrix(dst, c.info->shape, c.layout, m.data());
  return m;
}

void write_matrix(SafetensorsWriter& out, const Matrix& matrix, const Candidate& c) {
  if (c.layout != MatrixLayout::kConv) {
    out.write_f32(c.info->name,
                  std::span<const float>(matrix.data(), static_cast<size_t>(matrix.size())));
    return;
  }
  std::vector<float> ordered(static_cast<size_t>(c.info->numel));
  matrix_to_tensor(matrix.data(), c.info->shape, c.layout, ordered.data());
  out.write_f32(c.info->name, ordered);
}

void copy_tensor(SafetensorsWriter& out, const SafetensorsModel& model, const Candidate& c) {
  const SafetensorsFile& file = model.shard(c.shard);
  out.write(c.info->name, file.raw(*c.info));
  file.release(*c.info);
}

void warn_skipped(const std::vector<Candidate>& candidates, bool quiet, const std::string& suffix) {
  if (quiet) return;
  std::vector<std::string> vectors;
  for (const Candidate& c : candidates) {
    if (!c.selected || c.eligible) continue;
    if (c.info->shape.size() < 2 && dtype_is_float(c.info->dtype)) {
      vectors.push_back(c.info->name);
    } else {
      std::fprintf(stderr, "warning: skipping '%s' %s: %s%s\n", c.info->name.c_str(),
                   shape_string(c.info->shape).c_str(), c.skip_reason.c_str(), suffix.c_str());
    }
  }
  if (!vectors.empty()) {
    std::string list;
    for (size_t k = 0; k < vectors.size() && k < 3; ++k) list += (k ? ", " : "") + vectors[k];
    if (vectors.size() > 3) list += ", ...";
    std::fprintf(stderr, "warning: skipping %zu 1-D tensors (N:M needs a matrix): %s%s\n",
                 vectors.size(), list.c_str(), suffix.c_str());
  }
}

void check_output_path(const std::filesystem::path& input, const std::filesystem::path& output,
                       bool sharded) {
  namespace fs = std::filesystem;
  NMS_CHECK(!output.empty(), "the output path is empty");
  std::error_code ec;
  const fs::path in_canon = fs::weakly_canonical(input, ec);
  const fs::path out_canon = fs::weakly_canonical(output, ec);
  const fs::path in_dir = fs::is_directory(input) ? in_canon : in_canon.parent_path();
  NMS_CHECK(out_canon != in_canon, "the output path '", output.string(),
            "' is the input; write to a new path (inputs are never modified in place)");
  if (sharded) {
    NMS_CHECK(out_canon != in_dir, "the output directory '", output.string(),
              "' holds the input model; choose another directory");
    NMS_CHECK(!fs::exists(output) || fs::is_directory(output),
              "a sharded model is written to a directory, but '", output.string(), "' is a file");
  } else {
    NMS_CHECK(!fs::is_directory(output), "the output path '", output.string(),
              "' is a directory; give a .safetensors file path");
  }
  const fs::path parent = sharded ? out_canon.parent_path() : out_canon.parent_path();
  NMS_CHECK(parent.empty() || fs::is_directory(parent), "the output directory '", parent.string(),
            "' does not exist");
}

}  // namespace nms::cli
