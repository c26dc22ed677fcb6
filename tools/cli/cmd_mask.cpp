// nmsparse mask: N:M magnitude masks for every eligible tensor of a model, standard (row-wise),
// transposable (every m x m tile N:M in rows and columns), or Bi-Mask (--method bimask: forward
// mask, backward mask on permuted rows, and the permutation).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/dtype.h"
#include "nmsparse/mask/bimask.h"
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
  // --method bimask
  int candidates = 100;
  std::string search = "improve";
  std::string criterion = "kept";
  uint64_t seed = 0;
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
  // "auto" is exact: optimal, and measured faster than greedy and entropic at every pattern from
  // 2:4 to 16:32 (docs/performance.md), so no heuristic is ever the better default.
  const auto solver = transposable_solver_from_name(o.method);
  TransposableResult r =
      mask_transposable(s.view(), pattern, solver.value_or(TransposableSolver::kExact));
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

// A mask as BOOL bytes (1 = kept) in the tensor's own layout (inverse of read_matrix's reordering).
std::vector<std::byte> mask_bytes(const BitMask& mask, const Candidate& c) {
  Matrix ones(mask.rows(), mask.cols());
  for (int64_t i = 0; i < mask.rows(); ++i)
    for (int64_t j = 0; j < mask.cols(); ++j) ones(i, j) = mask.get(i, j) ? 1.0f : 0.0f;
  std::vector<float> ordered(static_cast<size_t>(c.info->numel));
  matrix_to_tensor(ones.data(), c.info->shape, c.layout, ordered.data());
  std::vector<std::byte> bytes(ordered.size());
  for (size_t k = 0; k < ordered.size(); ++k) bytes[k] = std::byte{ordered[k] != 0.0f};
  return bytes;
}

int run_bimask(const MaskOptions& o, const NmPattern& pattern);

int run_mask(const MaskOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  if (o.method == "bimask") return run_bimask(o, pattern);
  NMS_CHECK(o.transposable || (o.method == "auto" && o.compare.empty()),
            "--method and --compare choose a transposable solver; add --transposable");
  NMS_CHECK(
      o.method == "auto" || o.method == "exact" || o.method == "greedy" || o.method == "entropic",
      "unknown --method '", o.method, "' (expected exact, greedy, entropic, auto or bimask)");
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
      out.write(c.info->name, mask_bytes(lm.mask, c));  // BOOL, 1 where kept
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

// --method bimask: per eligible layer <name>.mask_fwd and <name>.mask_bwd (BOOL, tensor shape)
// and <name>.perm (I64 [rows]: perm[i] = original output row at permuted position i).
int run_bimask(const MaskOptions& o, const NmPattern& pattern) {
  NMS_CHECK(!o.transposable,
            "--method bimask is its own mask (forward + backward on permuted "
            "rows); drop --transposable");
  NMS_CHECK(o.scores.empty() && o.compare.empty(),
            "--scores and --compare do not apply to --method bimask (it ranks by |W|)");
  NMS_CHECK(o.search == "random" || o.search == "improve", "unknown --search '", o.search,
            "' (expected random or improve)");
  NMS_CHECK(o.criterion == "kept" || o.criterion == "eligible", "unknown --criterion '",
            o.criterion, "' (expected kept or eligible)");
  NMS_CHECK(o.candidates >= 0 && o.candidates <= 1'000'000, "--candidates (", o.candidates,
            ") must be in [0, 1000000]");
  BiMaskOptions bo;
  bo.candidates = o.candidates;
  bo.search = o.search == "random" ? BiMaskSearch::kRandom : BiMaskSearch::kImprove;
  bo.criterion = o.criterion == "kept" ? BiMaskCriterion::kKept : BiMaskCriterion::kEligible;
  bo.seed = o.seed;
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  std::vector<Candidate> cands = classify(model, TensorSelector(o.common), pattern);
  std::vector<PlannedTensor> plan;
  int64_t eligible = 0;
  for (Candidate& c : cands) {
    if (c.eligible && c.rows % pattern.m != 0) {
      c.eligible = false;
      c.skip_reason = "rows (" + std::to_string(c.rows) + ") not a multiple of m (" +
                      std::to_string(pattern.m) + ") for a backward mask";
    }
    if (!c.eligible) continue;
    ++eligible;
    plan.push_back({c.shard, {c.info->name + ".mask_fwd", DType::kBool, c.info->shape}});
    plan.push_back({c.shard, {c.info->name + ".mask_bwd", DType::kBool, c.info->shape}});
    plan.push_back({c.shard, {c.info->name + ".perm", DType::kI64, {c.rows}}});
  }
  warn_skipped(cands, o.common.quiet);
  NMS_CHECK(eligible > 0, "no tensor of '", o.input, "' can be masked to ", pattern.to_string(),
            " (see the warnings; check --include/--exclude and the pattern)");
  ModelWriter writer(
      model, o.output, plan,
      ModelWriter::inherit_metadata(
          model, {{"nmsparse", tool_annotation("mask --method bimask", pattern, "bimask-masks")}}));
  const bool improve = bo.search == BiMaskSearch::kImprove;
  std::vector<std::string> headers = {"tensor", "matrix", "identity", "best random"};
  if (improve) headers.push_back("improved");
  headers.push_back("ms");
  Table table(headers);
  nlohmann::json layers = nlohmann::json::array();
  int64_t fwd_total = 0;
  int64_t identity_total = 0;
  int64_t random_total = 0;
  int64_t final_total = 0;
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (const Candidate& c : cands) {
    progress.step(c.info->name);
    if (!c.eligible) {
      layers.push_back({{"name", c.info->name},
                        {"shape", c.info->shape},
                        {"status", c.selected ? "skipped" : "not-selected"},
                        {"reason", c.skip_reason}});
      continue;
    }
    const Matrix w = read_matrix(model, c, o.common.allow_nonfinite);
    const Stopwatch watch;
    const BiMaskResult r = bimask(w.view(), pattern, bo);
    const double seconds = watch.seconds();
    SafetensorsWriter& out = writer.shard(c.shard);
    out.write(c.info->name + ".mask_fwd", mask_bytes(r.forward, c));
    out.write(c.info->name + ".mask_bwd", mask_bytes(r.backward, c));
    std::vector<std::byte> perm_bytes(r.perm.size() * sizeof(int64_t));
    for (size_t i = 0; i < r.perm.size(); ++i) {  // little-endian I64, independent of the host
      const auto v = static_cast<uint64_t>(r.perm[i]);
      for (size_t b = 0; b < 8; ++b) perm_bytes[8 * i + b] = std::byte(v >> (8 * b));
    }
    out.write(c.info->name + ".perm", perm_bytes);
    fwd_total += r.forward_kept;
    identity_total += r.identity.kept;
    random_total += r.best_random.kept;
    final_total += r.final_score.kept;
    std::vector<std::string> row = {
        c.info->name, std::to_string(c.rows) + "x" + std::to_string(c.cols),
        format_fixed(r.fraction(r.identity), 4), format_fixed(r.fraction(r.best_random), 4)};
    if (improve) row.push_back(format_fixed(r.fraction(r.final_score), 4));
    row.push_back(format_ms(seconds));
    table.add_row(row);
    const auto score_json = [&r](const BiMaskScore& s) {
      return nlohmann::json{
          {"kept", s.kept}, {"eligible", s.eligible}, {"retained_fraction", r.fraction(s)}};
    };
    nlohmann::json layer = {{"name", c.info->name},
                            {"shape", c.info->shape},
                            {"status", "masked"},
                            {"matrix", {c.rows, c.cols}},
                            {"layout", layout_name(c.layout)},
                            {"forward_kept", r.forward_kept},
                            {"column_groups", r.column_groups},
                            {"identity", score_json(r.identity)},
                            {"best_random", score_json(r.best_random)},
                            {"best_candidate", r.best_candidate},
                            {"final", score_json(r.final_score)},
                            {"retained_fraction", r.retained()},
                            {"seconds", seconds}};
    if (improve) {
      layer["improved"] = score_json(r.final_score);
      layer["proposals"] = r.proposals;
      layer["accepted"] = r.accepted;
    }
    layers.push_back(layer);
  }
  writer.commit();
  const auto frac = [fwd_total](int64_t k) {
    return fwd_total == 0 ? 1.0 : static_cast<double>(k) / static_cast<double>(fwd_total);
  };
  int64_t skipped = 0;
  for (const Candidate& c : cands) skipped += c.selected && !c.eligible;
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\nbimask %s (kept:group, forward density %.4f / sparsity %.4f) on %lld tensors, "
        "%d candidates, search %s, criterion %s, seed %llu: backward keeps %.4f of the forward "
        "weights (identity %.4f, best random %.4f); skipped %lld; wrote %s (mask_fwd, mask_bwd "
        "BOOL; perm I64)\n",
        pattern.to_string().c_str(), pattern.density(), pattern.sparsity(),
        static_cast<long long>(eligible), o.candidates, o.search.c_str(), o.criterion.c_str(),
        static_cast<unsigned long long>(o.seed), frac(final_total), frac(identity_total),
        frac(random_total), static_cast<long long>(skipped), writer.location().c_str());
  }
  nlohmann::json report = {{"command", "mask"},
                           {"method", "bimask"},
                           {"input", o.input},
                           {"output", o.output},
                           {"pattern", pattern.to_string()},
                           {"n", pattern.n},
                           {"m", pattern.m},
                           {"density", pattern.density()},
                           {"sparsity", pattern.sparsity()},
                           {"content", "bimask-masks"},
                           {"candidates", o.candidates},
                           {"search", o.search},
                           {"criterion", o.criterion},
                           {"seed", o.seed},
                           {"identity_fraction", frac(identity_total)},
                           {"best_random_fraction", frac(random_total)},
                           {"retained_fraction", frac(final_total)},
                           {"masked", eligible},
                           {"skipped", skipped},
                           {"layers", layers}};
  if (improve) report["improved_fraction"] = frac(final_total);
  write_json_report(o.common.json_path, report);
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
                  "optimal; see docs/performance.md); or bimask (no --transposable): forward "
                  "mask, backward mask on permuted rows and the permutation, written as "
                  "<name>.mask_fwd, <name>.mask_bwd (BOOL) and <name>.perm (I64)")
      ->capture_default_str();
  cmd->add_option("--candidates", o->candidates,
                  "--method bimask: random permutations tried besides the identity (K)")
      ->capture_default_str();
  cmd->add_option("--search", o->search,
                  "--method bimask: random (best of identity + K random permutations) or improve "
                  "(then hill climbing by row swaps, at the cost of the random search)")
      ->capture_default_str();
  cmd->add_option("--criterion", o->criterion,
                  "--method bimask: kept (backward-kept weights) or eligible (column groups "
                  "already N:M)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "--method bimask: seed of the permutation search")
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
