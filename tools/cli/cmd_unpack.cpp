// nmsparse unpack: packed tensors (nmsparse or sparse-24-bitmask) back to dense tensors with their
// original names, shapes and dtypes.
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli_common.h"
#include "commands.h"
#include "model_writer.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/nm_tensors.h"
#include "report.h"

namespace nms::cli {
namespace {

struct UnpackOptions {
  CommonOptions common;
  std::string input;
  std::string output;
};

int run_unpack(const UnpackOptions& o) {
  o.common.apply_threads();
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  check_output_path(o.input, o.output, model.sharded());
  const TensorSelector selector(o.common);

  // Per shard: packed tensors (keyed by the name of their first part) and all part names.
  struct Job {
    size_t shard;
    const TensorInfo* info;            // plain tensor to copy, or the first packed part
    std::optional<PackedNmEntry> nm;   // nmsparse packed
    std::optional<Sparse24Entry> s24;  // sparse-24-bitmask
  };
  std::vector<Job> jobs;
  std::vector<PlannedTensor> plan;
  std::vector<ModelWriter::Metadata> metadata;
  int64_t unpacked = 0;
  for (size_t s = 0; s < model.shard_count(); ++s) {
    const SafetensorsFile& file = model.shard(s);
    ModelWriter::Metadata meta = file.metadata();
    std::map<std::string, PackedNmEntry> nm_by_part;
    std::map<std::string, Sparse24Entry> s24_by_part;
    std::set<std::string> other_parts;
    for (auto& e : find_packed_nm(file)) {
      if (!selector.selected(e.name)) continue;
      meta.erase(packed_nm_metadata_key(e.name));
      other_parts.insert(e.indices->name);
      nm_by_part.emplace(e.values->name, e);
    }
    for (auto& e : find_sparse24(file)) {
      if (!selector.selected(e.name)) continue;
      other_parts.insert(e.bitmask->name);
      other_parts.insert(e.shape->name);
      s24_by_part.emplace(e.compressed->name, e);
    }
    meta["nmsparse"] = nlohmann::json{{"tool", "nmsparse 0.1.0"}, {"command", "unpack"}}.dump();
    metadata.push_back(std::move(meta));
    for (const TensorInfo& t : file.tensors()) {
      if (other_parts.count(t.name)) continue;
      Job job{s, &t, std::nullopt, std::nullopt};
      if (auto it = nm_by_part.find(t.name); it != nm_by_part.end()) {
        job.nm = it->second;
        plan.push_back({s, {job.nm->name, job.nm->meta.dtype, job.nm->meta.tensor_shape}});
        ++unpacked;
      } else if (auto it2 = s24_by_part.find(t.name); it2 != s24_by_part.end()) {
        job.s24 = it2->second;
        plan.push_back({s, {job.s24->name, t.dtype, {job.s24->rows, job.s24->cols}}});
        ++unpacked;
      } else {
        plan.push_back({s, {t.name, t.dtype, t.shape}});
      }
      jobs.push_back(std::move(job));
    }
  }
  NMS_CHECK(unpacked > 0, "'", o.input,
            "' holds no packed tensor (nmsparse or sparse-24-bitmask) to unpack");
  ModelWriter writer(model, o.output, plan, metadata);
  Table table({"tensor", "shape", "from", "ms"});
  Progress progress(static_cast<int64_t>(jobs.size()), o.common.quiet);
  nlohmann::json layers = nlohmann::json::array();
  for (const Job& job : jobs) {
    progress.step(job.info->name);
    SafetensorsWriter& out = writer.shard(job.shard);
    const SafetensorsFile& file = model.shard(job.shard);
    const Stopwatch watch;
    if (job.nm) {
      const Matrix dense = nm_decompress(read_packed_nm(file, *job.nm));
      std::vector<float> ordered(static_cast<size_t>(dense.size()));
      matrix_to_tensor(dense.data(), job.nm->meta.tensor_shape, job.nm->meta.layout,
                       ordered.data());
      out.write_f32(job.nm->name, ordered);
      table.add_row({job.nm->name, shape_string(job.nm->meta.tensor_shape),
                     "nmsparse " + job.nm->meta.pattern.to_string(), format_ms(watch.seconds())});
      layers.push_back({{"name", job.nm->name}, {"from", "nmsparse"}});
    } else if (job.s24) {
      const Matrix dense = sparse24_to_dense(read_sparse24(file, *job.s24));
      out.write_f32(job.s24->name,
                    std::span<const float>(dense.data(), static_cast<size_t>(dense.size())));
      table.add_row({job.s24->name, shape_string({dense.rows(), dense.cols()}), "sparse-24-bitmask",
                     format_ms(watch.seconds())});
      layers.push_back({{"name", job.s24->name}, {"from", "sparse-24-bitmask"}});
    } else {
      out.write(job.info->name, file.raw(*job.info));
    }
    for (const TensorInfo* part :
         {job.info, job.nm ? job.nm->indices : nullptr, job.s24 ? job.s24->bitmask : nullptr}) {
      if (part != nullptr) file.release(*part);
    }
  }
  writer.commit();
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf("\nunpacked %lld tensors to dense; wrote %s\n", static_cast<long long>(unpacked),
                writer.location().c_str());
  }
  write_json_report(o.common.json_path, {{"command", "unpack"},
                                         {"input", o.input},
                                         {"output", o.output},
                                         {"unpacked", unpacked},
                                         {"layers", layers}});
  return kExitOk;
}

}  // namespace

void add_unpack_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<UnpackOptions>();
  CLI::App* cmd = app.add_subcommand(
      "unpack",
      "Expand packed tensors (nmsparse or sparse-24-bitmask) back to dense tensors with their "
      "original names, shapes and dtypes; other tensors are copied unchanged.");
  cmd->add_option("input", o->input, "Packed model")->required();
  cmd->add_option("output", o->output, "Output .safetensors (a directory for sharded input)")
      ->required();
  o->common.add_to(*cmd, /*with_nonfinite=*/false);
  cmd->callback([o, &exit_code] { exit_code = run_unpack(*o); });
}

}  // namespace nms::cli
