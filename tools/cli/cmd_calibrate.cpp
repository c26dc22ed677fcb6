// nmsparse calibrate: the calibration statistics (Hessian, activation norms, input sums) of every
// SparseLinear layer of a model trained by `nmsparse train` (or a pruned copy of its checkpoint),
// over examples of its training data, written as a calibration file for `nmsparse prune`.
// The work lives in nmsparse_torch (calibrate.h); this file parses flags and prints.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/torch/calibrate.h"
#include "nmsparse/torch/train.h"
#include "report.h"

namespace nms::cli {
namespace {

struct CalibrateCliOptions {
  std::string from;
  std::string out;
  int64_t samples = 1024;
  int64_t batch = 256;
  bool include_head = false;
  bool no_hessian = false;
  std::string precision = "f32";
  uint64_t seed = 0;
  bool seed_given = false;
  int threads = 0;
  std::string json_path;
  bool quiet = false;
};

std::string data_description(const CalibrateOptions& c) {
  if (c.kind == ModelKind::kCharLm) {
    return std::to_string(c.samples) + " training windows of " + std::to_string(c.context) +
           " characters (Jane Austen, seed " + std::to_string(c.seed) + ")";
  }
  return "the first " + std::to_string(c.samples) + " Fashion-MNIST training images" +
         (c.normalize ? " (normalised)" : " (x/255)");
}

int run_calibrate(const CalibrateCliOptions& o) {
  NMS_CHECK(o.precision == "f32" || o.precision == "f64", "unknown --precision '", o.precision,
            "' (expected f32 or f64)");
  check_output_path(o.from, o.out, /*sharded=*/false);
  const bool quiet = o.quiet || o.json_path == "-";
  set_training_threads(o.threads);
  const Stopwatch clock;

  TrainedModel trained = load_trained_model(o.from);
  CalibrateOptions c = calibrate_options_for(trained.options);
  c.samples = o.samples;
  c.batch = o.batch;
  c.include_head = o.include_head;
  c.with_hessian = !o.no_hessian;
  if (o.seed_given) c.seed = o.seed;
  c.validate();
  const std::string description = data_description(c);
  if (!quiet) {
    std::fprintf(stderr, "nmsparse calibrate: %s model from %s; %s\n",
                 std::string(model_kind_name(trained.options.model.kind)).c_str(),
                 trained.file.string().c_str(), description.c_str());
  }
  const TrainData data = load_default_train_data(trained.options);
  Progress progress((c.samples + c.batch - 1) / c.batch, quiet);
  progress.step("batch 1");
  c.on_progress = [&progress](int64_t done, int64_t total) {
    if (done < total) progress.step(std::to_string(done) + "/" + std::to_string(total));
  };
  const std::vector<LayerCalibration> layers = calibrate_model(*trained.model, data, c);

  const std::map<std::string, std::string> metadata = {
      {"nmsparse.calibration.source", trained.file.string()},
      {"nmsparse.calibration.data", description},
      {"nmsparse.calibration.tool", "nmsparse calibrate"}};
  write_calibration(o.out, layers,
                    o.precision == "f64" ? CalibrationPrecision::kF64 : CalibrationPrecision::kF32,
                    metadata);

  nlohmann::json report = {{"command", "calibrate"},
                           {"from", trained.file.string()},
                           {"output", o.out},
                           {"model", std::string(model_kind_name(trained.options.model.kind))},
                           {"data", description},
                           {"examples", c.samples},
                           {"hessian", c.with_hessian},
                           {"precision", o.precision},
                           {"seconds", clock.seconds()}};
  nlohmann::json rows = nlohmann::json::array();
  Table table({"layer", "in", "samples", "hessian", "mean |X_j|", "max |X_j|", "mean |sum x_j|"});
  for (const LayerCalibration& l : layers) {
    double mean_norm = 0;
    double max_norm = 0;
    double mean_sum = 0;
    for (int64_t j = 0; j < l.in; ++j) {
      mean_norm += l.act_norm[static_cast<size_t>(j)];
      max_norm = std::max(max_norm, l.act_norm[static_cast<size_t>(j)]);
      mean_sum += std::abs(l.input_sum[static_cast<size_t>(j)]);
    }
    mean_norm /= static_cast<double>(l.in);
    mean_sum /= static_cast<double>(l.in);
    table.add_row(
        {l.name, std::to_string(l.in), std::to_string(l.samples),
         l.has_hessian() ? "[" + std::to_string(l.in) + ", " + std::to_string(l.in) + "]" : "-",
         format_fixed(mean_norm, 3), format_fixed(max_norm, 3), format_fixed(mean_sum, 3)});
    rows.push_back({{"name", l.name},
                    {"in", l.in},
                    {"samples", l.samples},
                    {"mean_act_norm", mean_norm},
                    {"max_act_norm", max_norm}});
  }
  report["layers"] = rows;
  if (!quiet) {
    table.print(stdout);
    std::printf("\n%zu layers calibrated in %.1f s; written to %s\n", layers.size(),
                clock.seconds(), o.out.c_str());
  }
  write_json_report(o.json_path, report);
  return kExitOk;
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CalibrateCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Calibration statistics (H = Σ x xᵀ, ‖X_j‖₂, Σ x) of every SparseLinear layer of a model "
      "trained by `nmsparse train` (or a pruned copy of its checkpoint), over examples of its "
      "training data, for `nmsparse prune`. Layer L is named \"model.<module path>\" (e.g. "
      "model.layers.0 for the tensor model.layers.0.weight). See docs/calibration.md.");
  cmd->add_option("--from", o->from,
                  "Training directory or checkpoint .safetensors (a pruned copy works too)")
      ->required();
  cmd->add_option("OUT", o->out, "Output calibration file (.safetensors)")->required();
  cmd->add_option("--samples", o->samples,
                  "Calibration examples: images (mlp, vit; the first N of the training set) or "
                  "windows (charlm)")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Examples per forward pass")->capture_default_str();
  cmd->add_flag("--include-head", o->include_head, "Calibrate the head too (skipped by default)");
  cmd->add_flag("--no-hessian", o->no_hessian,
                "Only act_norm and input_sum (enough for magnitude and Wanda)");
  cmd->add_option("--precision", o->precision, "Stored precision: f32 or f64")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "charlm: seed of the window draw (default: the run's)")
      ->each([o](const std::string&) { o->seed_given = true; });
  cmd->add_option("--threads", o->threads,
                  "Threads for LibTorch, OpenMP and OpenBLAS (0 = default)")
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "Also write a JSON report here ('-' = stdout)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress and table");
  cmd->callback([o, &exit_code] { exit_code = run_calibrate(*o); });
}

}  // namespace nms::cli
