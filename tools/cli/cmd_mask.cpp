// nmsparse mask: N:M magnitude masks for every eligible tensor of a model, standard (row-wise) or
// transposable (every m x m tile N:M in rows and columns).
#include <cfloat>
#include <cmath>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/dtype.h"
#include "nmsparse/mask/standard.h"
#include "nmsparse/mask/transposable.h"
#include "report.h"

namespace nms::cli {
namespace {

struct MaskOptions {
  CommonOptions common;
  std::string nm;
  std::string input;
  std::string output;
  bool write_masks = false;
  bool transposable = false;
  std::string method = "auto";
  std::string compare;
  std::string scores;  // a model with one score tensor per masked tensor (same name and shape)
};

double abs_sum(const Matrix& m) {
  double s = 0.0;
  for (int64_t k = 0; k < m.size(); ++k) s += std::fabs(static_cast<double>(m.data()[k]));
  return s;
}

// |W| as scores. With --allow-nonfinite (documented in --help): NaN scores 0, +-Inf the largest
// finite float, so every solver sees finite non-negative scores.
Matrix magnitude_scores(const Matrix& w) {
  Matrix scores(w.rows(), w.cols());
  for (int64_t k = 0; k < w.size(); ++k) {
    const float a = std::fabs(w.data()[k]);
    scores.data()[k] = std::isnan(a) ? 0.0f : (std::isinf(a) ? FLT_MAX : a);
  }
  return scores;
}

// The mask of one layer and what the report says about it.
struct LayerMask {
  BitMask mask;
  nlohmann::json fields;  // solver figures for the JSON report
  std::string retained;   // objective / row-wise N:M objective, for the table
  std::string gap;        // gap to exact, for the table (--compare exact)
};

TransposableResult solve_transposable(const std::string& method, const Matrix& scores,
                                      const NmPattern& pattern) {
  if (method == "greedy") return mask_transposable_greedy(scores.view(), pattern);
  if (method == "entropic") return mask_transposable_entropic(scores.view(), pattern);
  // "exact", and "auto": exact is optimal and measured faster than greedy and entropic at every
  // pattern from 2:4 to 16:32 (docs/performance.md), so no heuristic is ever the better default.
  return mask_transposable_exact(scores.view(), pattern);
}

// `scores` replaces |W| when given (--scores); it must be finite and non-negative.
LayerMask compute_mask(const MaskOptions& o, const Matrix& w, const Matrix* given_scores,
                       const NmPattern& pattern) {
  LayerMask out;
  if (!o.transposable && given_scores == nullptr) {
    out.mask = o.common.allow_nonfinite ? mask_nm_rows(magnitude_scores(w).view(), pattern)
                                        : mask_nm_magnitude(w.view(), pattern);
    return out;
  }
  const Matrix scores = given_scores != nullptr ? Matrix() : magnitude_scores(w);
  const Matrix& s = given_scores != nullptr ? *given_scores : scores;
  if (!o.transposable) {
    out.mask = mask_nm_rows(s.view(), pattern);
    return out;
  }
  TransposableResult r = solve_transposable(o.method, s, pattern);
#ifndef NDEBUG
  check_transposable_result(s.view(), pattern, r, r.stats.status == SolveStatus::kOptimal);
#endif
  const double rowwise = mask_score(s.view(), mask_nm_rows(s.view(), pattern));
  const double retained = rowwise > 0.0 ? r.stats.objective / rowwise : 1.0;
  out.retained = format_fixed(retained, 4);
  out.fields = {{"method", o.method == "auto" ? "exact" : o.method},
                {"objective", r.stats.objective},
                {"rowwise_objective", rowwise},
                {"retained_vs_rowwise", retained},
                {"tiles", r.stats.tiles},
                {"tiles_exactly_n", r.stats.tiles_exactly_n}};
  if (o.compare == "exact") {
    const double exact = mask_transposable_exact(s.view(), pattern).stats.objective;
    const double gap = exact > 0.0 ? (exact - r.stats.objective) / exact : 0.0;
    out.gap = format_fixed(100.0 * gap, 3) + "%";
    out.fields["exact_objective"] = exact;
    out.fields["gap_to_exact"] = gap;
  }
  out.mask = std::move(r.mask);
  return out;
}

// The score tensor of candidate `c` from the --scores model: same name, same shape, any float
// dtype, finite and non-negative (checked by the solvers, which name the offending element).
Matrix read_scores(const SafetensorsModel& scores, const std::string& path, const Candidate& c) {
  const auto entry = scores.find(c.info->name);
  NMS_CHECK(entry.has_value(), "--scores '", path, "' has no tensor '", c.info->name,
            "' (it needs one score tensor per masked tensor, with the same name and shape)");
  NMS_CHECK(entry->info->shape == c.info->shape, "--scores tensor '", c.info->name, "' has shape ",
            shape_string(entry->info->shape), ", the weight ", shape_string(c.info->shape));
  Candidate sc = c;
  sc.shard = entry->shard;
  sc.info = entry->info;
  return read_matrix(scores, sc, /*allow_nonfinite=*/false);
}

int run_mask(const MaskOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  NMS_CHECK(o.transposable || (o.method == "auto" && o.compare.empty()),
            "--method and --compare choose a transposable solver; add --transposable");
  NMS_CHECK(
      o.method == "auto" || o.method == "exact" || o.method == "greedy" || o.method == "entropic",
      "unknown --method '", o.method, "' (expected exact, greedy, entropic or auto)");
  NMS_CHECK(o.compare.empty() || o.compare == "exact", "unknown --compare '", o.compare,
            "' (only 'exact' is supported)");
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  std::vector<Candidate> cands = classify(model, TensorSelector(o.common), pattern);
  std::optional<SafetensorsModel> score_model;
  if (!o.scores.empty()) score_model = SafetensorsModel::open(o.scores);

  std::vector<PlannedTensor> plan;
  int64_t eligible = 0;
  for (Candidate& c : cands) {
    if (c.eligible && o.transposable && c.rows % pattern.m != 0) {
      c.eligible = false;
      c.skip_reason = "rows (" + std::to_string(c.rows) + ") not a multiple of m (" +
                      std::to_string(pattern.m) + ") for a transposable mask";
    }
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
  const std::string content = o.write_masks ? "masks" : "masked-weights";
  ModelWriter writer(
      model, o.output, plan,
      ModelWriter::inherit_metadata(
          model, {{"nmsparse", tool_annotation(o.transposable ? "mask --transposable" : "mask",
                                               pattern, content)}}));

  std::vector<std::string> headers = {"tensor", "shape", "matrix", "density", "kept |W|"};
  if (o.transposable) headers.push_back("vs row-wise");
  if (!o.compare.empty()) headers.push_back("gap to exact");
  headers.push_back("ms");
  Table table(headers);
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
    std::optional<Matrix> given;
    if (score_model) given = read_scores(*score_model, o.scores, c);
    const Stopwatch watch;
    const LayerMask lm = compute_mask(o, w, given ? &*given : nullptr, pattern);
    const double seconds = watch.seconds();
    const double layer_total = abs_sum(w);
    apply_mask(w.view(), lm.mask);
    const double layer_kept = abs_sum(w);
    const int64_t layer_count = lm.mask.count();
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
        for (int64_t j = 0; j < w.cols(); ++j) w(i, j) = lm.mask.get(i, j) ? 1.0f : 0.0f;
      std::vector<float> ordered(static_cast<size_t>(c.info->numel));
      matrix_to_tensor(w.data(), c.info->shape, c.layout, ordered.data());
      std::vector<std::byte> bytes(ordered.size());
      for (size_t k = 0; k < ordered.size(); ++k) bytes[k] = std::byte{ordered[k] != 0.0f};
      out.write(c.info->name, bytes);
    } else {
      write_matrix(out, w, c);
    }
    std::vector<std::string> row = {c.info->name, shape_string(c.info->shape),
                                    std::to_string(c.rows) + "x" + std::to_string(c.cols),
                                    format_fixed(density, 4), format_fixed(mass, 4)};
    if (o.transposable) row.push_back(lm.retained);
    if (!o.compare.empty()) row.push_back(lm.gap);
    row.push_back(format_ms(seconds));
    table.add_row(row);
    nlohmann::json layer = {
        {"name", c.info->name},       {"shape", c.info->shape},          {"status", "masked"},
        {"matrix", {c.rows, c.cols}}, {"layout", layout_name(c.layout)}, {"density", density},
        {"sparsity", 1.0 - density},  {"kept_mass_fraction", mass},      {"seconds", seconds}};
    if (lm.fields.is_object()) layer.update(lm.fields);
    layers.push_back(layer);
  }
  writer.commit();

  const double density = static_cast<double>(kept) / static_cast<double>(masked_elements);
  const double mass = total_abs == 0.0 ? 1.0 : kept_abs / total_abs;
  int64_t skipped = 0;
  for (const Candidate& c : cands) skipped += c.selected && !c.eligible;
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\nmasked %lld tensors to %s%s (kept:group): density %.4f / sparsity %.4f, kept |W| "
        "fraction %.4f; skipped %lld; wrote %s%s\n",
        static_cast<long long>(eligible), pattern.to_string().c_str(),
        o.transposable ? " transposable" : "", density, 1.0 - density, mass,
        static_cast<long long>(skipped), writer.location().c_str(),
        o.write_masks ? " (masks, BOOL)" : "");
  }
  write_json_report(o.common.json_path, {{"command", "mask"},
                                         {"input", o.input},
                                         {"output", o.output},
                                         {"pattern", pattern.to_string()},
                                         {"n", pattern.n},
                                         {"m", pattern.m},
                                         {"transposable", o.transposable},
                                         {"content", content},
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
      "Apply N:M magnitude masks: standard (top-N |W| of every M along the input dim, ties to "
      "the lower index) or --transposable (every MxM tile keeps at most N per row and column, "
      "so W and W^T are both N:M). OUT holds every tensor of IN: masked ones in their input "
      "dtype, skipped ones unchanged.");
  cmd->add_option("--nm", o->nm, "Pattern N:M = keep N of every M (e.g. 2:4, 1:4, 8:16)")
      ->required();
  cmd->add_option("input", o->input, "Input model (.safetensors, index.json or directory)")
      ->required();
  cmd->add_option("output", o->output,
                  "Output .safetensors (a directory for sharded input); never the input")
      ->required();
  cmd->add_flag("--write-masks", o->write_masks,
                "Write the masks (BOOL, 1 = kept, same shape as the weight) instead of weights");
  cmd->add_flag("--transposable", o->transposable,
                "Transposable mask: N:M along rows and columns of every MxM tile");
  cmd->add_option("--method", o->method,
                  "Transposable solver: exact (optimal min-cost flow per tile, certified), greedy "
                  "(2-approximation), entropic (TSENOR-style optimal transport), auto (= exact: "
                  "measured faster than greedy and entropic at 2:4 to 16:32 on this CPU, and "
                  "optimal; see docs/performance.md)")
      ->capture_default_str();
  cmd->add_option("--scores", o->scores,
                  "Rank by these scores instead of |W|: a model with a finite, non-negative tensor "
                  "of the same name and shape for every masked tensor (e.g. Wanda scores)");
  cmd->add_option("--compare", o->compare,
                  "With 'exact': also solve exactly and report each layer's gap to the optimum");
  o->common.add_to(*cmd);
  cmd->callback([o, &exit_code] { exit_code = run_mask(*o); });
}

}  // namespace nms::cli
