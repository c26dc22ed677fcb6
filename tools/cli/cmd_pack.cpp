// nmsparse pack: dense N:M tensors to the compressed formats (nmsparse's own, docs/format.md,
// and compressed-tensors' sparse-24-bitmask).
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/nm_tensors.h"
#include "report.h"

namespace nms::cli {
namespace {

enum class PackFormat { kNmsparse, kSparse24 };

int64_t bytes_of(const TensorSpec& spec) {
  int64_t b = dtype_size(spec.dtype);
  for (int64_t d : spec.shape) b *= d;
  return b;
}

}  // namespace

int run_pack_request(const PackRequest& o) {
  const NmPattern pattern = NmPattern::parse(o.nm);
  NMS_CHECK(o.format == "nmsparse" || o.format == "sparse-24-bitmask", "unknown --format '",
            o.format, "' (expected nmsparse or sparse-24-bitmask)");
  const PackFormat format = o.format == "nmsparse" ? PackFormat::kNmsparse : PackFormat::kSparse24;
  const auto axis = axis_from_name(o.axis);
  NMS_CHECK(axis.has_value(), "unknown --axis '", o.axis, "' (expected rows or cols)");
  if (format == PackFormat::kSparse24) {
    NMS_CHECK(pattern == NmPattern::make(2, 4), "--format sparse-24-bitmask stores 2:4 only, not ",
              pattern.to_string());
    NMS_CHECK(*axis == NmAxis::kRows, "--format sparse-24-bitmask groups along rows only");
  }
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  std::vector<Candidate> cands = classify(model, TensorSelector(o.common), pattern);

  // Plan: which tensors get packed, and the output specs and metadata that follow.
  std::vector<PlannedTensor> plan;
  std::vector<ModelWriter::Metadata> metadata = ModelWriter::inherit_metadata(
      model, {{"nmsparse", tool_annotation("pack", pattern, o.format)}});
  std::vector<PackedNmMeta> metas(cands.size());
  int64_t packed = 0;
  for (size_t k = 0; k < cands.size(); ++k) {
    Candidate& c = cands[k];
    if (c.eligible && *axis == NmAxis::kCols && c.rows % pattern.m != 0) {
      c.eligible = false;
      c.skip_reason = "rows (" + std::to_string(c.rows) + ") not a multiple of m for --axis cols";
    }
    if (c.eligible && format == PackFormat::kSparse24 && c.layout != MatrixLayout::kMatrix) {
      c.eligible = false;
      c.skip_reason = "sparse-24-bitmask holds 2-D tensors only";
    }
    if (!c.eligible) {
      plan.push_back({c.shard, {c.info->name, c.info->dtype, c.info->shape}});
      continue;
    }
    ++packed;
    if (format == PackFormat::kSparse24) {
      for (auto& spec : sparse24_specs(c.info->name, c.rows, c.cols, c.info->dtype)) {
        plan.push_back({c.shard, spec});
      }
      continue;
    }
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
  NMS_CHECK(packed > 0, "no tensor of '", o.input, "' can be packed as ", pattern.to_string(),
            " (see the warnings; check --include/--exclude and the pattern)");
  ModelWriter writer(model, o.output, plan, metadata);

  Table table({"tensor", "shape", "format", "dense bytes", "packed bytes", "ratio", "ms"});
  nlohmann::json layers = nlohmann::json::array();
  int64_t dense_total = 0;
  int64_t packed_total = 0;
  Progress progress(static_cast<int64_t>(cands.size()), o.common.quiet);
  for (size_t k = 0; k < cands.size(); ++k) {
    const Candidate& c = cands[k];
    progress.step(c.info->name);
    SafetensorsWriter& out = writer.shard(c.shard);
    if (!c.eligible) {
      copy_tensor(out, model, c);
      if (c.selected) {
        layers.push_back(
            {{"name", c.info->name}, {"status", "skipped"}, {"reason", c.skip_reason}});
      }
      continue;
    }
    const Matrix w = read_matrix(model, c, o.common.allow_nonfinite);
    const Stopwatch watch;
    int64_t packed_bytes = 0;
    try {
      if (format == PackFormat::kSparse24) {
        const Sparse24Bitmask s = sparse24_from_dense(w.view());
        write_sparse24(out, c.info->name, s);
        for (const auto& spec : sparse24_specs(c.info->name, c.rows, c.cols, c.info->dtype)) {
          packed_bytes += bytes_of(spec);
        }
      } else {
        const CompressedNm cn = nm_compress(w.view(), pattern, *axis);
        write_packed_nm(out, c.info->name, metas[k], cn);
        for (const auto& spec : packed_nm_specs(c.info->name, metas[k])) {
          packed_bytes += bytes_of(spec);
        }
      }
    } catch (const Error& e) {
      NMS_THROW("tensor '", c.info->name, "' cannot be packed as ", pattern.to_string(), ": ",
                e.what(), ". Mask it first: nmsparse mask --nm ", pattern.to_string(), " IN OUT");
    }
    const double seconds = watch.seconds();
    const auto dense_bytes = static_cast<int64_t>(c.info->byte_size);
    dense_total += dense_bytes;
    packed_total += packed_bytes;
    const double ratio = static_cast<double>(packed_bytes) / static_cast<double>(dense_bytes);
    table.add_row({c.info->name, shape_string(c.info->shape), o.format, std::to_string(dense_bytes),
                   std::to_string(packed_bytes), format_fixed(ratio, 3), format_ms(seconds)});
    layers.push_back({{"name", c.info->name},
                      {"shape", c.info->shape},
                      {"status", "packed"},
                      {"format", o.format},
                      {"dense_bytes", dense_bytes},
                      {"packed_bytes", packed_bytes},
                      {"seconds", seconds}});
  }
  writer.commit();
  const double ratio = static_cast<double>(packed_total) / static_cast<double>(dense_total);
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf(
        "\npacked %lld tensors as %s %s (density %.4f / sparsity %.4f): %lld -> %lld bytes "
        "(%.3f); wrote %s\n",
        static_cast<long long>(packed), pattern.to_string().c_str(), o.format.c_str(),
        pattern.density(), pattern.sparsity(), static_cast<long long>(dense_total),
        static_cast<long long>(packed_total), ratio, writer.location().c_str());
  }
  write_json_report(o.common.json_path, {{"command", "pack"},
                                         {"input", o.input},
                                         {"output", o.output},
                                         {"pattern", pattern.to_string()},
                                         {"format", o.format},
                                         {"axis", o.axis},
                                         {"packed", packed},
                                         {"dense_bytes", dense_total},
                                         {"packed_bytes", packed_total},
                                         {"layers", layers}});
  return kExitOk;
}

void add_pack_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<PackRequest>();
  CLI::App* cmd = app.add_subcommand(
      "pack",
      "Compress N:M tensors: values + packed indices (nmsparse format, docs/format.md) or "
      "compressed-tensors' sparse-24-bitmask. Tensors must already be N:M (use `nmsparse mask`); "
      "others are copied unchanged.");
  cmd->add_option("--nm", o->nm, "Pattern N:M = at most N kept of every M (e.g. 2:4)")->required();
  cmd->add_option("--format", o->format, "nmsparse (any N:M) or sparse-24-bitmask (2:4 only)")
      ->capture_default_str();
  cmd->add_option("--axis", o->axis,
                  "rows: groups along the input dim (forward); cols: along the output dim")
      ->capture_default_str();
  cmd->add_option("input", o->input, "Input model")->required();
  cmd->add_option("output", o->output, "Output .safetensors (a directory for sharded input)")
      ->required();
  o->common.add_to(*cmd);
  cmd->callback([o, &exit_code] { exit_code = run_pack_request(*o); });
}

}  // namespace nms::cli
