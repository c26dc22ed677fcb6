// nmsparse gradprune: N:M pruning of gradients (MVUE, approx-MVUE 2:4, or biased top-N) for every
// eligible tensor of a safetensors file, written dense (masked) or packed (--compressed).
#include <cmath>
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/grad/prune.h"
#include "nmsparse/io/nm_tensors.h"
#include "report.h"

namespace nms::cli {
namespace {

struct GradPruneCliOptions {
  CommonOptions common;
  std::string method = "mvue";
  std::string nm = "2:4";
  std::string axis = "rows";
  uint64_t seed = 0;
  bool compressed = false;
  std::string input;
  std::string output;
};

int run_gradprune(const GradPruneCliOptions& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  const auto method = grad_method_from_name(o.method);
  NMS_CHECK(method.has_value(), "unknown --method '", o.method,
            "' (expected mvue, mvue-approx24 or topn)");
  NMS_CHECK(*method != GradMethod::kMvueApprox24 || pattern == NmPattern::make(2, 4),
            "--method mvue-approx24 is defined for 2:4 only, not ", pattern.to_string());
  const auto axis = axis_from_name(o.axis);
  NMS_CHECK(axis.has_value(), "unknown --axis '", o.axis, "' (expected rows or cols)");
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  std::vector<Candidate> cands = classify(model, TensorSelector(o.common), pattern);

  std::vector<PlannedTensor> plan;
  std::vector<ModelWriter::Metadata> metadata = ModelWriter::inherit_metadata(
      model,
      {{"nmsparse", tool_annotation("gradprune --method " + o.method, pattern,
                                    o.compressed ? "packed-gradients" : "pruned-gradients")}});
  std::vector<PackedNmMeta> metas(cands.size());
  int64_t eligible = 0;
  for (size_t k = 0; k < cands.size(); ++k) {
    Candidate& c = cands[k];
    if (c.eligible && *axis == NmAxis::kCols && c.rows % pattern.m != 0) {
      c.eligible = false;
      c.skip_reason = "rows (" + std::to_string(c.rows) + ") not a multiple of m (" +
                      std::to_string(pattern.m) + ") for --axis cols";
    }
    if (!c.eligible || !o.compressed) {
      plan.push_back({c.shard, {c.info->name, c.info->dtype, c.info->shape}});
      eligible += c.eligible;
      continue;
    }
    ++eligible;
    PackedNmMeta& meta = metas[k];
    meta.pattern = pattern;
    meta.axis = *axis;
    meta.rows = c.rows;
    meta.cols = c.cols;
    meta.dtype = c.info->dtype;
    meta.tensor_shape = c.info->shape;
    meta.layout = c.layout;
    for (auto& spec : packed_nm_specs(c.info->name, meta)) plan.push_back({c.shard, spec});
    metadata[c.shard][packed_nm_metadata_key(c.info->name)] = packed_nm_metadata_json(meta);
  }
  warn_skipped(cands, o.common.quiet, " (copied unchanged)");
  NMS_CHECK(eligible > 0, "no tensor of '", o.input, "' can be pruned to ", pattern.to_string(),
            " along ", o.axis, " (see the warnings; check --include/--exclude and the pattern)");
  ModelWriter writer(model, o.output, plan, metadata);

  Table table({"tensor", "shape", "matrix", "stream", "density", "sum ratio", "ms"});
  nlohmann::json layers = nlohmann::json::array();
  int64_t kept_total = 0;
  int64_t elements_total = 0;
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (size_t k = 0; k < cands.size(); ++k) {
    const Candidate& c = cands[k];
    progress.step(c.info->name);
    SafetensorsWriter& out = writer.shard(c.shard);
    if (!c.eligible) {
      copy_tensor(out, model, c);
      layers.push_back({{"name", c.info->name},
                        {"shape", c.info->shape},
                        {"status", c.selected ? "skipped" : "not-selected"},
                        {"reason", c.skip_reason}});
      continue;
    }
    const Matrix g = read_matrix(model, c, /*allow_nonfinite=*/false);
    const uint64_t stream = tensor_stream_id(c.info->name);
    const GradPruneOptions po{*method, pattern, *axis, o.seed, stream};
    const Stopwatch watch;
    Matrix x;
    CompressedNm cn;
    try {
      if (o.compressed) {
        grad_prune_compressed_into(g.view(), po, cn);
        x = nm_decompress(cn);  // for the report only
      } else {
        x = grad_prune(g.view(), po);
      }
    } catch (const Error& e) {
      NMS_THROW("tensor '", c.info->name, "': ", e.what());
    }
    const double seconds = watch.seconds();
    int64_t kept = 0;
    double sum_in = 0.0;
    double sum_out = 0.0;
    for (int64_t e = 0; e < g.size(); ++e) {
      kept += x.data()[e] != 0.0f;
      sum_in += g.data()[e];
      sum_out += x.data()[e];
    }
    if (o.compressed) {
      write_packed_nm(out, c.info->name, metas[k], cn);
    } else {
      write_matrix(out, x, c);
    }
    kept_total += kept;
    elements_total += g.size();
    const double density = static_cast<double>(kept) / static_cast<double>(g.size());
    // Σ output / Σ input: ~1 for the unbiased methods on a large tensor, typically < 1 for topn.
    const double sum_ratio = sum_in != 0.0 ? sum_out / sum_in : 1.0;
    char stream_hex[20];
    std::snprintf(stream_hex, sizeof stream_hex, "%016llx",
                  static_cast<unsigned long long>(stream));
    table.add_row({c.info->name, shape_string(c.info->shape),
                   std::to_string(c.rows) + "x" + std::to_string(c.cols), stream_hex,
                   format_fixed(density, 4), format_fixed(sum_ratio, 4), format_ms(seconds)});
    layers.push_back({{"name", c.info->name},
                      {"shape", c.info->shape},
                      {"status", "pruned"},
                      {"matrix", {c.rows, c.cols}},
                      {"layout", layout_name(c.layout)},
                      {"stream", stream_hex},
                      {"density", density},
                      {"sparsity", 1.0 - density},
                      {"sum_ratio", sum_ratio},
                      {"seconds", seconds}});
  }
  writer.commit();
  int64_t skipped = 0;
  for (const Candidate& c : cands) skipped += c.selected && !c.eligible;
  const double density = elements_total > 0
                             ? static_cast<double>(kept_total) / static_cast<double>(elements_total)
                             : 0.0;
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\npruned %lld tensors with %s %s (kept:group) along %s, seed %llu: density %.4f / "
        "sparsity %.4f; skipped %lld; wrote %s%s\n",
        static_cast<long long>(eligible), o.method.c_str(), pattern.to_string().c_str(),
        o.axis.c_str(), static_cast<unsigned long long>(o.seed), density, 1.0 - density,
        static_cast<long long>(skipped), writer.location().c_str(),
        o.compressed ? " (packed)" : "");
  }
  write_json_report(o.common.json_path, {{"command", "gradprune"},
                                         {"input", o.input},
                                         {"output", o.output},
                                         {"method", o.method},
                                         {"pattern", pattern.to_string()},
                                         {"n", pattern.n},
                                         {"m", pattern.m},
                                         {"axis", o.axis},
                                         {"seed", o.seed},
                                         {"compressed", o.compressed},
                                         {"isa", std::string(isa_name(isa_active()))},
                                         {"density", density},
                                         {"sparsity", 1.0 - density},
                                         {"pruned", eligible},
                                         {"skipped", skipped},
                                         {"layers", layers}});
  return kExitOk;
}

}  // namespace

void add_gradprune_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GradPruneCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "gradprune",
      "N:M-prune gradients: mvue (unbiased, minimum variance: water-filled probabilities + "
      "systematic sampling, kept values g/p), mvue-approx24 (sequential 2:4 draw with "
      "Horvitz-Thompson weights), topn (biased top-N by magnitude). Groups of M run along each "
      "row (--axis cols: down each column, the token axis of dY [tokens, out]). Each element's "
      "randomness depends only on (seed, tensor name, element index): the stream of a tensor is "
      "FNV-1a 64 of its name.");
  cmd->add_option("--method", o->method, "mvue, mvue-approx24 (2:4 only) or topn")
      ->capture_default_str();
  cmd->add_option("--nm", o->nm, "Pattern N:M = keep at most N of every M")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_option("--axis", o->axis, "Groups along rows or cols")->capture_default_str();
  cmd->add_flag("--compressed", o->compressed,
                "Write pruned tensors packed (<name>.values + <name>.indices, as `pack`)");
  cmd->add_option("input", o->input, "Input gradients (.safetensors, index.json or directory)")
      ->required();
  cmd->add_option("output", o->output, "Output .safetensors (a directory for sharded input)")
      ->required();
  o->common.add_to(*cmd, /*with_nonfinite=*/false);
  cmd->callback([o, &exit_code] { exit_code = run_gradprune(*o); });
}

}  // namespace nms::cli
