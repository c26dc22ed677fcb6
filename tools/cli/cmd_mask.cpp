// nmsparse mask: standard N:M magnitude masks for every eligible tensor of a model.
#include <cmath>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/dtype.h"
#include "nmsparse/mask/standard.h"
#include "report.h"

namespace nms::cli {
namespace {

struct MaskOptions {
  CommonOptions common;
  std::string nm;
  std::string input;
  std::string output;
  bool write_masks = false;
};

double abs_sum(const Matrix& m) {
  double s = 0.0;
  for (int64_t k = 0; k < m.size(); ++k) s += std::fabs(static_cast<double>(m.data()[k]));
  return s;
}

// The magnitude mask; with --allow-nonfinite, NaN scores as 0 (documented in --help).
BitMask magnitude_mask(const Matrix& w, const NmPattern& pattern, bool allow_nonfinite) {
  if (!allow_nonfinite) return mask_nm_magnitude(w.view(), pattern);
  Matrix scores(w.rows(), w.cols());
  for (int64_t k = 0; k < w.size(); ++k) {
    const float a = std::fabs(w.data()[k]);
    scores.data()[k] = std::isnan(a) ? 0.0f : a;
  }
  return mask_nm_rows(scores.view(), pattern);
}

int run_mask(const MaskOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  const std::vector<Candidate> cands = classify(model, TensorSelector(o.common), pattern);

  std::vector<PlannedTensor> plan;
  int64_t eligible = 0;
  for (const Candidate& c : cands) {
    if (c.eligible) ++eligible;
    if (o.write_masks) {
      if (c.eligible) plan.push_back({c.shard, {c.info->name, DType::kBool, c.info->shape}});
    } else {
      plan.push_back({c.shard, {c.info->name, c.info->dtype, c.info->shape}});
    }
  }
  warn_skipped(cands, o.common.quiet);
  NMS_CHECK(eligible > 0, "no tensor of '", o.input, "' can be masked to ", pattern.to_string(),
            " (see the warnings; check --include/--exclude and the pattern)");
  ModelWriter writer(
      model, o.output, plan,
      ModelWriter::inherit_metadata(
          model, {{"nmsparse",
                   tool_annotation("mask", pattern, o.write_masks ? "masks" : "masked-weights")}}));

  Table table({"tensor", "shape", "matrix", "density", "kept |W|", "ms"});
  nlohmann::json layers = nlohmann::json::array();
  double total_abs = 0.0;
  double kept_abs = 0.0;
  int64_t kept = 0;
  int64_t masked_elements = 0;
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (const Candidate& c : cands) {
    progress.step(c.info->name);
    SafetensorsWriter& out = writer.shard(c.shard);
    if (!c.eligible) {
      if (!o.write_masks) copy_tensor(out, model, c);
      layers.push_back({{"name", c.info->name},
                        {"shape", c.info->shape},
                        {"status", c.selected ? "skipped" : "not-selected"},
                        {"reason", c.skip_reason}});
      continue;
    }
    Matrix w = read_matrix(model, c, o.common.allow_nonfinite);
    const Stopwatch watch;
    const BitMask mask = magnitude_mask(w, pattern, o.common.allow_nonfinite);
    const double seconds = watch.seconds();
    const double layer_total = abs_sum(w);
    apply_mask(w.view(), mask);
    const double layer_kept = abs_sum(w);
    const int64_t layer_count = mask.count();
    const double density = static_cast<double>(layer_count) / static_cast<double>(w.size());
    const double mass = layer_total == 0.0 ? 1.0 : layer_kept / layer_total;
    total_abs += layer_total;
    kept_abs += layer_kept;
    kept += layer_count;
    masked_elements += w.size();
    if (o.write_masks) {
      // BOOL output: 1 where kept. Reuses the masked weights' buffer as 0/1 floats for the
      // reordering, then narrows to bytes.
      for (int64_t i = 0; i < w.rows(); ++i)
        for (int64_t j = 0; j < w.cols(); ++j) w(i, j) = mask.get(i, j) ? 1.0f : 0.0f;
      std::vector<float> ordered(static_cast<size_t>(c.info->numel));
      matrix_to_tensor(w.data(), c.info->shape, c.layout, ordered.data());
      std::vector<std::byte> bytes(ordered.size());
      for (size_t k = 0; k < ordered.size(); ++k) bytes[k] = std::byte{ordered[k] != 0.0f};
      out.write(c.info->name, bytes);
    } else {
      write_matrix(out, w, c);
    }
    table.add_row({c.info->name, shape_string(c.info->shape),
                   std::to_string(c.rows) + "x" + std::to_string(c.cols), format_fixed(density, 4),
                   format_fixed(mass, 4), format_ms(seconds)});
    layers.push_back({{"name", c.info->name},
                      {"shape", c.info->shape},
                      {"status", "masked"},
                      {"matrix", {c.rows, c.cols}},
                      {"layout", layout_name(c.layout)},
                      {"density", density},
                      {"sparsity", 1.0 - density},
                      {"kept_mass_fraction", mass},
                      {"seconds", seconds}});
  }
  writer.commit();

  const double density = static_cast<double>(kept) / static_cast<double>(masked_elements);
  const double mass = total_abs == 0.0 ? 1.0 : kept_abs / total_abs;
  int64_t skipped = 0;
  for (const Candidate& c : cands) skipped += c.selected && !c.eligible;
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\nmasked %lld tensors to %s (kept:group): density %.4f / sparsity %.4f, kept |W| "
        "fraction %.4f; skipped %lld; wrote %s%s\n",
        static_cast<long long>(eligible), pattern.to_string().c_str(), density, 1.0 - density, mass,
        static_cast<long long>(skipped), writer.location().c_str(),
        o.write_masks ? " (masks, BOOL)" : "");
  }
  write_json_report(o.common.json_path, {{"command", "mask"},
                                         {"input", o.input},
                                         {"output", o.output},
                                         {"pattern", pattern.to_string()},
                                         {"n", pattern.n},
                                         {"m", pattern.m},
                                         {"content", o.write_masks ? "masks" : "masked-weights"},
                                         {"density", density},
                                         {"sparsity", 1.0 - density},
                                         {"kept_mass_fraction", mass},
                                         {"masked", eligible},
                                         {"skipped", skipped},
                                         {"layers", layers}});
  return kExitOk;
}

}  // namespace

void add_mask_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<MaskOptions>();
  CLI::App* cmd = app.add_subcommand(
      "mask",
      "Apply standard N:M magnitude masks (top-N |W| of every M along the input dim, ties to the "
      "lower index). OUT holds every tensor of IN: masked ones in their input dtype, skipped "
      "ones unchanged.");
  cmd->add_option("--nm", o->nm, "Pattern N:M = keep N of every M (e.g. 2:4, 1:4, 8:16)")
      ->required();
  cmd->add_option("input", o->input, "Input model (.safetensors, index.json or directory)")
      ->required();
  cmd->add_option("output", o->output,
                  "Output .safetensors (a directory for sharded input); never the input")
      ->required();
  cmd->add_flag("--write-masks", o->write_masks,
                "Write the masks (BOOL, 1 = kept, same shape as the weight) instead of weights");
  o->common.add_to(*cmd);
  cmd->callback([o, &exit_code] { exit_code = run_mask(*o); });
}

}  // namespace nms::cli
