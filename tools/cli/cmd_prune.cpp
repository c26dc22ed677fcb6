// nmsparse prune: post-training pruning of every eligible linear layer of a safetensors model with
// magnitude, Wanda, SparseGPT or AdaPrune (nmsparse_prune), row-wise N:M, transposable N:M or
// unstructured; streaming one layer (plus its calibration statistics) at a time.
#include <cblas.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/atomic_file.h"
#include "nmsparse/prune/calibration.h"
#include "nmsparse/prune/prune.h"
#include "report.h"

namespace nms::cli {
namespace {

struct PruneCliOptions {
  CommonOptions common;
  std::string method = "magnitude";
  std::string nm;
  bool transposable = false;
  bool unstructured = false;
  std::string solver = "exact";
  std::string calib;
  double damp = 0.01;
  int64_t block = 128;
  int64_t iterations = 1000;
  double lr = 1e-3;
  double bias_lr = 1e-2;
  bool packed = false;
  std::string input;
  std::string output;
};

PruneOptions library_options(const PruneCliOptions& o, const NmPattern& pattern) {
  NMS_CHECK(!(o.transposable && o.unstructured),
            "--transposable and --unstructured exclude each other");
  const auto solver = transposable_solver_from_name(o.solver);
  NMS_CHECK(solver.has_value(), "unknown --solver '", o.solver,
            "' (expected exact, entropic or greedy)");
  PruneOptions p;
  p.pattern = pattern;
  p.structure = o.transposable   ? PruneStructure::kTransposable
                : o.unstructured ? PruneStructure::kUnstructured
                                 : PruneStructure::kRowwise;
  p.solver = *solver;
  p.damp = o.damp;
  p.block = o.block;
  p.iterations = o.iterations;
  p.lr = o.lr;
  p.bias_lr = o.bias_lr;
  try {
    p.validate();
  } catch (const Error& e) {
    NMS_THROW("invalid option: ", e.what());  // the fields are named as the flags
  }
  return p;
}

// The recipe beside the output: everything needed to repeat the run.
nlohmann::json recipe_json(const PruneCliOptions& o, const PruneOptions& p) {
  nlohmann::json r = {
      {"command", "prune"},
      {"method", o.method},
      {"nm", p.pattern.to_string()},
      {"structure", prune_structure_name(p.structure)},
      {"input", o.input},
      {"calibration", o.calib.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.calib)},
      {"include", o.common.include},
      {"exclude", o.common.exclude}};
  if (p.structure == PruneStructure::kTransposable) r["solver"] = o.solver;
  if (o.method == "sparsegpt") {
    r["damp"] = p.damp;
    r["block"] = p.block;
  }
  if (o.method == "adaprune") {
    r["iterations"] = p.iterations;
    r["lr"] = p.lr;
    r["bias_lr"] = p.bias_lr;
  }
  return r;
}

std::filesystem::path recipe_path(const std::filesystem::path& output) {
  std::filesystem::path p = output;
  if (std::filesystem::is_directory(output)) return output / "prune.recipe.json";
  p.replace_extension(".recipe.json");
  return p;
}

std::vector<float> read_vector(const SafetensorsModel& model, const TensorInfo& info,
                               size_t shard) {
  return model.shard(shard).read_f32(info);
}

int run_prune(const PruneCliOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  const auto method = prune_method_from_name(o.method);
  NMS_CHECK(method.has_value(), "unknown --method '", o.method,
            "' (expected magnitude, wanda, sparsegpt or adaprune)");
  const PruneOptions options = library_options(o, pattern);
  NMS_CHECK(*method == PruneMethod::kMagnitude || !o.calib.empty(), "--method ", o.method,
            " needs --calib STATS (from `nmsparse calibrate` or examples/calibrate_torch.py)");
  NMS_CHECK(!o.packed || options.structure != PruneStructure::kUnstructured,
            "--packed stores N:M groups; an --unstructured result cannot be packed");
  o.common.apply_threads();
  if (o.common.threads > 0) openblas_set_num_threads(o.common.threads);

  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  NMS_CHECK(!o.packed || !model.sharded(),
            "--packed supports single-file models; run `nmsparse "
            "pack` on the pruned directory instead");
  std::optional<CalibrationFile> calib;
  if (!o.calib.empty()) calib = CalibrationFile::open(o.calib);

  // Unstructured pruning needs no divisibility: classify with 1:1 then.
  const NmPattern classify_pattern =
      options.structure == PruneStructure::kUnstructured ? NmPattern::make(1, 1) : pattern;
  std::vector<Candidate> cands = classify(model, TensorSelector(o.common), classify_pattern);
  std::set<std::string> calibrated;
  for (Candidate& c : cands) {
    if (!c.eligible) continue;
    const std::string layer = calibration_layer_of(c.info->name);
    if (calib) {
      if (!calib->contains(layer)) {
        // Tensors chosen explicitly must be pruned; otherwise (a whole checkpoint, with optimiser
        // state and heads) a tensor without statistics is skipped with a warning.
        NMS_CHECK(o.common.include.empty(), "tensor '", c.info->name,
                  "' is selected by --include "
                  "but --calib '",
                  o.calib, "' has no statistics for its layer '", layer,
                  "' (calibrate that layer, or narrow --include)");
        c.eligible = false;
        c.skip_reason = "no calibration statistics for layer '" + layer + "'";
        continue;
      }
      if (c.layout != MatrixLayout::kMatrix) {
        c.eligible = false;
        c.skip_reason = "calibration statistics describe 2-D Linear inputs; this is a " +
                        std::string(layout_name(c.layout)) + " tensor";
        continue;
      }
    }
    if (options.structure == PruneStructure::kTransposable && c.rows % pattern.m != 0) {
      c.eligible = false;
      c.skip_reason = "rows (" + std::to_string(c.rows) + ") not a multiple of m (" +
                      std::to_string(pattern.m) + ") for a transposable mask";
      continue;
    }
    calibrated.insert(layer);
  }
  int64_t eligible = 0;
  for (const Candidate& c : cands) eligible += c.eligible;
  warn_skipped(cands, o.common.quiet, " (copied unchanged)");
  if (calib && !o.common.quiet) {
    for (const std::string& layer : calib->layers())
      if (calibrated.count(layer) == 0)
        std::fprintf(stderr, "warning: calibration layer '%s' matches no prunable tensor of %s\n",
                     layer.c_str(), o.input.c_str());
  }
  NMS_CHECK(eligible > 0, "no tensor of '", o.input, "' can be pruned to ", pattern.to_string(),
            calib ? " with the layers of --calib" : "",
            " (see the warnings; check --include/--exclude, the pattern and the calibration file)");

  // AdaPrune also tunes "<layer>.bias" when the model has one: it is written with its weight.
  std::map<std::string, const Candidate*> tuned_bias;  // bias name -> its candidate
  if (*method == PruneMethod::kAdaPrune) {
    for (const Candidate& c : cands) {
      if (c.info->shape.size() != 1 || !c.info->name.ends_with(".bias")) continue;
      const std::string layer = c.info->name.substr(0, c.info->name.size() - 5);
      for (const Candidate& w : cands)
        if (w.eligible && calibration_layer_of(w.info->name) == layer &&
            w.info->shape[0] == c.info->shape[0] && dtype_is_float(c.info->dtype))
          tuned_bias[c.info->name] = &c;
    }
  }

  std::vector<PlannedTensor> plan;
  for (const Candidate& c : cands)
    plan.push_back({c.shard, {c.info->name, c.info->dtype, c.info->shape}});
  const nlohmann::json recipe = recipe_json(o, options);
  const std::string structure_label = std::string(prune_method_name(*method)) + " " +
                                      std::string(prune_structure_name(options.structure));
  // With --packed the dense result goes to a temporary file that `pack` then compresses.
  const std::filesystem::path dense_out = o.packed
                                              ? std::filesystem::path(o.output).concat(".dense.tmp")
                                              : std::filesystem::path(o.output);
  ModelWriter writer(
      model, dense_out, plan,
      ModelWriter::inherit_metadata(
          model,
          {{"nmsparse", tool_annotation("prune " + structure_label, pattern, "pruned-weights")},
           {"nmsparse_prune_recipe", recipe.dump()}}));

  std::vector<std::string> headers = {"tensor", "matrix", "density", "rel. error", "ms"};
  if (*method == PruneMethod::kAdaPrune) headers.insert(headers.end() - 1, "MSE before/after");
  Table table(headers);
  nlohmann::json layers = nlohmann::json::array();
  int64_t kept = 0, total = 0;
  double error_sum = 0.0;
  int64_t error_count = 0;
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (const Candidate& c : cands) {
    progress.step(c.info->name);
    SafetensorsWriter& out = writer.shard(c.shard);
    if (tuned_bias.count(c.info->name)) continue;  // written with its weight
    if (!c.eligible) {
      copy_tensor(out, model, c);
      layers.push_back({{"name", c.info->name},
                        {"shape", c.info->shape},
                        {"status", c.selected ? "skipped" : "not-selected"},
                        {"reason", c.skip_reason}});
      continue;
    }
    const std::string layer = calibration_layer_of(c.info->name);
    std::optional<LayerCalibration> stats;
    if (calib) stats = calib->read(layer);
    Matrix w = read_matrix(model, c, o.common.allow_nonfinite);
    const Matrix dense = w;
    const Candidate* bias_cand = nullptr;
    if (auto it = tuned_bias.find(layer + ".bias"); it != tuned_bias.end()) bias_cand = it->second;
    std::vector<float> bias, dense_bias;
    if (bias_cand != nullptr) {
      bias = read_vector(model, *bias_cand->info, bias_cand->shard);
      dense_bias = bias;
    }
    PruneResult r;
    try {
      r = prune_layer(*method, w.view(), bias, stats ? &*stats : nullptr, options);
    } catch (const Error& e) {
      NMS_THROW("tensor '", c.info->name, "': ", e.what());
    }
    write_matrix(out, w, c);
    if (bias_cand != nullptr) writer.shard(bias_cand->shard).write_f32(bias_cand->info->name, bias);
    std::optional<double> error;
    if (stats && stats->has_hessian()) {
      error = reconstruction_error(dense.view(), w.view(), *stats, dense_bias, bias);
      error_sum += *error;
      ++error_count;
    }
    kept += r.stats.kept;
    total += w.size();
    std::vector<std::string> row = {
        c.info->name, std::to_string(c.rows) + "x" + std::to_string(c.cols),
        format_fixed(r.stats.density, 4), error ? format_fixed(*error, 4) : "-"};
    if (*method == PruneMethod::kAdaPrune)
      row.push_back(format_fixed(r.stats.loss_before, 6) + " / " +
                    format_fixed(r.stats.loss_after, 6));
    row.push_back(format_ms(r.stats.seconds));
    table.add_row(row);
    nlohmann::json entry = {
        {"name", c.info->name},
        {"shape", c.info->shape},
        {"status", "pruned"},
        {"matrix", {c.rows, c.cols}},
        {"density", r.stats.density},
        {"sparsity", 1.0 - r.stats.density},
        {"relative_error", error ? nlohmann::json(*error) : nlohmann::json(nullptr)},
        {"seconds", r.stats.seconds}};
    if (bias_cand != nullptr) entry["bias_tuned"] = bias_cand->info->name;
    if (*method == PruneMethod::kAdaPrune) {
      entry["mse_before"] = r.stats.loss_before;
      entry["mse_after"] = r.stats.loss_after;
    }
    layers.push_back(entry);
  }
  writer.commit();
  std::string location = writer.location();
  if (o.packed) {
    try {
      PackRequest pack;
      pack.nm = o.nm;
      pack.input = dense_out.string();
      pack.output = o.output;
      pack.common.quiet = true;
      pack.common.threads = o.common.threads;
      run_pack_request(pack);
    } catch (...) {
      std::filesystem::remove(dense_out);
      throw;
    }
    std::filesystem::remove(dense_out);
    location = o.output + " (packed, nmsparse format)";
  }
  write_file_atomic(recipe_path(o.output), recipe.dump(2) + "\n");

  const double density = total > 0 ? static_cast<double>(kept) / static_cast<double>(total) : 0.0;
  int64_t skipped = 0;
  for (const Candidate& c : cands) skipped += c.selected && !c.eligible;
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\npruned %lld tensors with %s to %s%s (kept:group): density %.4f / sparsity %.4f%s; "
        "skipped %lld; wrote %s and %s\n",
        static_cast<long long>(eligible), o.method.c_str(), pattern.to_string().c_str(),
        options.structure == PruneStructure::kTransposable   ? " transposable"
        : options.structure == PruneStructure::kUnstructured ? " unstructured"
                                                             : "",
        density, 1.0 - density,
        error_count > 0
            ? (", mean relative error " + format_fixed(error_sum / error_count, 4)).c_str()
            : "",
        static_cast<long long>(skipped), location.c_str(), recipe_path(o.output).string().c_str());
  }
  write_json_report(o.common.json_path, {{"command", "prune"},
                                         {"recipe", recipe},
                                         {"output", o.output},
                                         {"packed", o.packed},
                                         {"pattern", pattern.to_string()},
                                         {"n", pattern.n},
                                         {"m", pattern.m},
                                         {"density", density},
                                         {"sparsity", 1.0 - density},
                                         {"mean_relative_error",
                                          error_count > 0 ? nlohmann::json(error_sum / error_count)
                                                          : nlohmann::json(nullptr)},
                                         {"pruned", eligible},
                                         {"skipped", skipped},
                                         {"layers", layers}});
  return kExitOk;
}

}  // namespace

void add_prune_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<PruneCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prune",
      "Post-training pruning of a safetensors model, one layer at a time: magnitude (|W|), wanda "
      "(|W|*||X_j||), sparsegpt (OBS sweep with weight updates) or adaprune (magnitude mask, then "
      "Adam on the kept weights to match the dense outputs), to row-wise N:M (default), "
      "--transposable N:M (W and W^T both N:M) or --unstructured at density N/M. With --calib, "
      "exactly the tensors whose layer has statistics are pruned (a tensor selected by --include "
      "without statistics is an error). OUT is a valid model (dense "
      "with zeros, or --packed); OUT's recipe is written beside it (.recipe.json).");
  cmd->add_option("--method", o->method, "magnitude, wanda, sparsegpt or adaprune")
      ->capture_default_str();
  cmd->add_option("--nm", o->nm, "Pattern N:M = keep N of every M (e.g. 2:4, 8:16)")->required();
  cmd->add_flag("--transposable", o->transposable,
                "Every MxM tile keeps at most N per row and column (the mask solver replaces the "
                "per-group top-N; TSENOR's construction)");
  cmd->add_flag(
      "--unstructured", o->unstructured,
      "Unstructured sparsity at density N/M (the same count in every row), for reference");
  cmd->add_option("--solver", o->solver, "Transposable solver: exact, entropic or greedy")
      ->capture_default_str();
  cmd->add_option("--calib", o->calib,
                  "Calibration statistics (nmsparse calibrate, examples/calibrate_torch.py; "
                  "docs/calibration.md); needed by wanda, sparsegpt and adaprune");
  cmd->add_option("--damp", o->damp, "sparsegpt: dampening, as a fraction of mean diag(H)")
      ->capture_default_str();
  cmd->add_option("--block", o->block, "sparsegpt: columns per lazy-update block")
      ->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "adaprune: Adam steps per layer")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "adaprune: Adam step size of the weights")->capture_default_str();
  cmd->add_option("--bias-lr", o->bias_lr, "adaprune: Adam step size of the bias")
      ->capture_default_str();
  cmd->add_flag("--packed", o->packed,
                "Write the compressed nmsparse N:M format (docs/format.md) instead of dense zeros");
  cmd->add_option("input", o->input, "Input model (.safetensors, index.json or directory)")
      ->required();
  cmd->add_option("output", o->output,
                  "Output .safetensors (a directory for sharded input); never the input")
      ->required();
  o->common.add_to(*cmd);
  cmd->callback([o, &exit_code] { exit_code = run_prune(*o); });
}

}  // namespace nms::cli
