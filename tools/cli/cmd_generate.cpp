// nmsparse generate: a deterministic synthetic model with the shapes of a small decoder-only
// transformer plus a convolutional stem, for demos, tests and memory measurements. The weights are
// N(0, 1/fan_in) from the counter-based RNG keyed by (seed, tensor index, element index), so the
// file is bitwise the same on every machine and for any thread count.
#include <cmath>
#include <memory>
#include <numbers>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/io/atomic_file.h"
#include "nmsparse/io/dtype.h"
#include "report.h"

namespace nms::cli {
namespace {

struct GenerateOptions {
  std::string output;
  int layers = 2;
  int64_t hidden = 256;
  int64_t intermediate = 688;
  int64_t vocab = 2048;
  std::string dtype = "F32";
  uint64_t seed = 0;
  int shards = 1;
  bool quiet = false;
};

std::vector<TensorSpec> model_specs(const GenerateOptions& o, DType dtype) {
  const int64_t h = o.hidden;
  const int64_t f = o.intermediate;
  std::vector<TensorSpec> s;
  s.push_back({"model.embed_tokens.weight", dtype, {o.vocab, h}});
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s.push_back({p + "input_layernorm.weight", dtype, {h}});
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      s.push_back({p + "self_attn." + proj + ".weight", dtype, {h, h}});
    }
    s.push_back({p + "post_attention_layernorm.weight", dtype, {h}});
    s.push_back({p + "mlp.gate_proj.weight", dtype, {f, h}});
    s.push_back({p + "mlp.up_proj.weight", dtype, {f, h}});
    s.push_back({p + "mlp.down_proj.weight", dtype, {h, f}});
  }
  s.push_back({"model.norm.weight", dtype, {h}});
  s.push_back({"lm_head.weight", dtype, {o.vocab, h}});
  // A small vision stem: its 7x7x3 kernel (K = 147) is divisible by no M > 1 except 3, 7, 21, 49.
  s.push_back({"vision.stem.weight", dtype, {64, 3, 7, 7}});
  s.push_back({"vision.block.conv.weight", dtype, {128, 64, 3, 3}});
  s.push_back({"vision.block.conv.bias", dtype, {128}});
  s.push_back({"model.rotary.position_ids", DType::kI64, {1, 128}});
  return s;
}

// Standard normal from two uniforms (Box-Muller); u1 in (0, 1].
float normal(const CounterRng& rng, uint64_t k) {
  const double u1 = 1.0 - rng.uniform_double(2 * k);
  const double u2 = rng.uniform_double(2 * k + 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

int run_generate(const GenerateOptions& o) {
  namespace fs = std::filesystem;
  const auto dtype = dtype_from_name(o.dtype);
  NMS_CHECK(dtype && dtype_is_float(*dtype), "--dtype must be F32, F16, BF16 or F64, not '",
            o.dtype, "'");
  NMS_CHECK(o.layers >= 0 && o.hidden > 0 && o.intermediate > 0 && o.vocab > 0,
            "model sizes must be positive");
  const std::vector<TensorSpec> specs = model_specs(o, *dtype);
  NMS_CHECK(o.shards >= 1 && o.shards <= static_cast<int>(specs.size()), "--shards (", o.shards,
            ") must be in [1, ", specs.size(), "]");
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"nmsparse", nlohmann::json{{"tool", "nmsparse 0.1.0"},
                                  {"command", "generate"},
                                  {"seed", o.seed},
                                  {"layers", o.layers},
                                  {"hidden", o.hidden},
                                  {"intermediate", o.intermediate},
                                  {"vocab", o.vocab}}
                       .dump()}};

  // Contiguous runs of tensors per shard.
  std::vector<std::vector<size_t>> shard_members(static_cast<size_t>(o.shards));
  for (size_t t = 0; t < specs.size(); ++t) {
    shard_members[t * static_cast<size_t>(o.shards) / specs.size()].push_back(t);
  }
  if (o.shards > 1) {
    fs::create_directories(o.output);
    NMS_CHECK(fs::is_directory(o.output), "cannot create the output directory '", o.output, "'");
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  uint64_t total_size = 0;
  Progress progress(static_cast<int64_t>(specs.size()), o.quiet);
  for (int s = 0; s < o.shards; ++s) {
    std::vector<TensorSpec> shard_specs;
    for (size_t t : shard_members[s]) shard_specs.push_back(specs[t]);
    const std::string file = o.shards > 1 ? "model-" + std::to_string(s + 1) + "-of-" +
                                                std::to_string(o.shards) + ".safetensors"
                                          : "";
    const fs::path path = o.shards > 1 ? fs::path(o.output) / file : fs::path(o.output);
    SafetensorsWriter writer(path, shard_specs, metadata);
    for (size_t t : shard_members[s]) {
      const TensorSpec& spec = specs[t];
      progress.step(spec.name);
      int64_t numel = 1;
      for (int64_t d : spec.shape) numel *= d;
      total_size += static_cast<uint64_t>(numel * dtype_size(spec.dtype));
      if (o.shards > 1) weight_map.emplace_back(spec.name, file);
      const CounterRng rng(o.seed, t);
      if (spec.dtype == DType::kI64) {
        std::vector<int64_t> ids(static_cast<size_t>(numel));
        for (int64_t k = 0; k < numel; ++k) ids[k] = k;
        writer.write(spec.name, std::as_bytes(std::span<const int64_t>(ids)));
        continue;
      }
      std::vector<float> values(static_cast<size_t>(numel));
      if (spec.shape.size() == 1) {
        for (auto& v : values) v = 1.0f;  // norm scales and biases start at one
      } else {
        const double fan_in = static_cast<double>(numel / spec.shape[0]);
        const auto scale = static_cast<float>(1.0 / std::sqrt(fan_in));
        for (int64_t k = 0; k < numel; ++k)
          values[k] = scale * normal(rng, static_cast<uint64_t>(k));
      }
      writer.write_f32(spec.name, values);
    }
    writer.commit();
  }
  if (o.shards > 1) {
    write_shard_index(fs::path(o.output) / "model.safetensors.index.json", weight_map, total_size);
  }
  if (!o.quiet) {
    std::printf("generated %zu tensors (%.1f MB, %s, seed %llu) in %s%s\n", specs.size(),
                static_cast<double>(total_size) / 1e6, o.dtype.c_str(),
                static_cast<unsigned long long>(o.seed), o.output.c_str(),
                o.shards > 1 ? (" (" + std::to_string(o.shards) + " shards + index)").c_str() : "");
  }
  return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Write a deterministic synthetic model (decoder-only transformer shapes + a conv stem) "
      "for demos, tests and benchmarks.");
  cmd->add_option("output", o->output, "Output .safetensors (a directory with --shards > 1)")
      ->required();
  cmd->add_option("--layers", o->layers, "Transformer blocks")->capture_default_str();
  cmd->add_option("--hidden", o->hidden, "Hidden size")->capture_default_str();
  cmd->add_option("--intermediate", o->intermediate, "MLP size")->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "Vocabulary size")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "F32, BF16, F16 or F64")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_option("--shards", o->shards, "Write a sharded model with this many shards")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o->quiet, "No output but errors");
  cmd->callback([o, &exit_code] { exit_code = run_generate(*o); });
}

}  // namespace nms::cli
