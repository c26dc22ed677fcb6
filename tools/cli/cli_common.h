// Shared pieces of the nmsparse subcommands: options every command takes, tensor selection,
// reading a tensor as the matrix the N:M conventions act on, and the exit-code contract.
//
// Exit codes: 0 success; 1 `verify` found a violation; 2 bad input or usage (the message says
// what was wrong and what to do); 3 internal error (a bug: please report).
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "nmsparse/core/aligned_buffer.h"
#include "nmsparse/core/nm_pattern.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/io/sharded.h"
#include "nmsparse/io/tensor_matrix.h"

namespace nms::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitViolation = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

// Options shared by the commands that walk a model's tensors.
struct CommonOptions {
  std::vector<std::string> include;  // regexes; a tensor is selected if any matches (all if none)
  std::vector<std::string> exclude;  // regexes; a selected tensor matching any is dropped
  std::string json_path;             // machine-readable report ("-" = stdout)
  bool quiet = false;
  bool allow_nonfinite = false;
  int threads = 0;  // 0 = OpenMP default

  void add_to(CLI::App& app, bool with_nonfinite = true);
  void apply_threads() const;
};

// One tensor of the input and what the command will do with it.
struct Candidate {
  size_t shard = 0;
  const TensorInfo* info = nullptr;
  bool selected = false;    // passes --include/--exclude
  bool eligible = false;    // selected, float, >= 2-D, cols % m == 0
  std::string skip_reason;  // why not eligible (empty when eligible or not selected)
  MatrixLayout layout = MatrixLayout::kMatrix;
  int64_t rows = 0;
  int64_t cols = 0;
};

class TensorSelector {
 public:
  explicit TensorSelector(const CommonOptions& options);  // throws on an invalid regex
  bool selected(const std::string& name) const;

 private:
  std::vector<std::regex> include_;
  std::vector<std::regex> exclude_;
};

// Classifies every tensor of the model for `pattern` (m must divide the matrix's cols).
std::vector<Candidate> classify(const SafetensorsModel& model, const TensorSelector& selector,
                                const NmPattern& pattern);

// Reads a candidate as an fp32 matrix (conversions from F16/BF16/F64, NHWC reordering for conv).
// Unless allow_nonfinite, a NaN or Inf throws naming the tensor and the element's index. The
// tensor's file pages are released afterwards, so streaming a model keeps one tensor resident.
Matrix read_matrix(const SafetensorsModel& model, const Candidate& c, bool allow_nonfinite);
// Writes `matrix` as the candidate's tensor (inverse of read_matrix's reordering, conversion to
// the output spec's dtype).
void write_matrix(SafetensorsWriter& out, const Matrix& matrix, const Candidate& c);
// Copies a tensor's bytes unchanged to `out`, then releases its file pages.
void copy_tensor(SafetensorsWriter& out, const SafetensorsModel& model, const Candidate& c);

// Warns about every selected tensor that is not eligible. 1-D tensors (norms, biases) are summed
// up in one line; the others get a line each. `suffix` is appended (e.g. " (copied unchanged)").
void warn_skipped(const std::vector<Candidate>& candidates, bool quiet,
                  const std::string& suffix = "");

// Refuses an output that would overwrite the input (same path, or the same directory for a
// sharded model), or an output directory that does not exist.
void check_output_path(const std::filesystem::path& input, const std::filesystem::path& output,
                       bool sharded);

// The `__metadata__["nmsparse"]` annotation every output carries: a JSON object naming the
// command, pattern, content and tool version. (Keys "nmsparse.<tensor>" describe packed tensors.)
std::string tool_annotation(const std::string& command, const NmPattern& pattern,
                            const std::string& content);

// "[4096, 4096]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace nms::cli
