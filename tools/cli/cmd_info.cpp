// nmsparse info: what a model holds and which tensors a pattern can sparsify.
#include <memory>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/io/dtype.h"
#include "nmsparse/io/nm_tensors.h"
#include "nmsparse/kernels/nm_gemm.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "nmsparse/mask/diversity.h"
#include "report.h"

namespace nms::cli {
namespace {

struct InfoOptions {
  CommonOptions common;
  std::string input;
  std::string nm = "2:4";
  bool system = false;
  bool diversity = false;
};

// Mask diversity of one m x m tile for the pattern: row-wise and transposable counts.
nlohmann::json diversity_report(const NmPattern& p, bool quiet) {
  const MaskDiversity row = diversity_rowwise_tile(p);
  nlohmann::json j = {{"pattern", p.to_string()},
                      {"tile", {p.m, p.m}},
                      {"rowwise", {{"exact", row.exact}, {"log10", row.log10}}}};
  std::string transposable =
      "not computed (m > " + std::to_string(kMaxTransposableDiversityM) + ")";
  if (p.m <= kMaxTransposableDiversityM) {
    const MaskDiversity t = diversity_transposable_tile(p);
    j["transposable"] = {{"exact", t.exact}, {"log10", t.log10}};
    transposable = (t.exact.size() <= 24 ? t.exact : "10^" + format_fixed(t.log10, 3)) +
                   " (log10 " + format_fixed(t.log10, 3) + ")";
  }
  if (!quiet) {
    std::printf("mask diversity of one %dx%d tile, %s (kept:group):\n", p.m, p.m,
                p.to_string().c_str());
    std::printf("  row-wise N:M      %s (log10 %.3f)\n",
                (row.exact.size() <= 24 ? row.exact : "10^" + format_fixed(row.log10, 3)).c_str(),
                row.log10);
    std::printf("  transposable N:M  %s\n", transposable.c_str());
  }
  return j;
}

nlohmann::json system_info() {
  return {{"version", "0.1.0"},
          {"threads", max_threads()},
          {"isa", std::string(isa_name(isa_active()))},
          {"isa_supported", std::string(isa_name(isa_supported()))},
          {"nm_gemm_kernel", std::string(nm_gemm_kernel_name(nm_gemm_kernel_in_use()))},
          {"nm_gemm_bf16", nm_gemm_bf16_kernel_active() ? "avx512bf16" : "scalar"},
#ifdef __VERSION__
          {"compiler", __VERSION__},
#endif
#ifdef NDEBUG
          {"build", "release"},
#else
          {"build", "debug"},
#endif
          {"openmp",
#ifdef _OPENMP
           true
#else
           false
#endif
          }};
}

int run_info(const InfoOptions& o) {
  o.common.apply_threads();
  nlohmann::json report = {{"command", "info"}};
  if (o.diversity) {
    report["diversity"] =
        diversity_report(NmPattern::parse(o.nm), o.common.quiet || o.common.json_path == "-");
    if (o.input.empty() && !o.system) {
      write_json_report(o.common.json_path, report);
      return kExitOk;
    }
  }
  if (o.system) {
    report["system"] = system_info();
    if (!o.common.quiet && o.common.json_path != "-") {
      for (const auto& [k, v] : report["system"].items()) {
        std::printf("%-10s %s\n", k.c_str(),
                    v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
      }
    }
    if (o.input.empty()) {
      write_json_report(o.common.json_path, report);
      return kExitOk;
    }
  }
  NMS_CHECK(!o.input.empty(), "give a model file (or --system, --diversity)");
  const NmPattern pattern = NmPattern::parse(o.nm);
  const SafetensorsModel model = SafetensorsModel::open(o.input);
  Table table({"tensor", "dtype", "shape", "matrix", pattern.to_string()});
  nlohmann::json tensors = nlohmann::json::array();
  int64_t params = 0;
  int64_t eligible_params = 0;
  int64_t eligible = 0;
  uint64_t bytes = 0;
  for (const Candidate& c : classify(model, TensorSelector(o.common), pattern)) {
    if (!c.selected) continue;
    params += c.info->numel;
    bytes += c.info->byte_size;
    if (c.eligible) {
      ++eligible;
      eligible_params += c.info->numel;
    }
    const std::string matrix = c.rows > 0 ? std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                                                (c.layout == MatrixLayout::kMatrix
                                                     ? ""
                                                     : " " + std::string(layout_name(c.layout)))
                                          : "-";
    table.add_row({c.info->name, std::string(dtype_name(c.info->dtype)),
                   shape_string(c.info->shape), matrix, c.eligible ? "eligible" : c.skip_reason});
    nlohmann::json t = {{"name", c.info->name},
                        {"dtype", dtype_name(c.info->dtype)},
                        {"shape", c.info->shape},
                        {"shard", c.shard},
                        {"eligible", c.eligible}};
    if (c.rows > 0) {
      t["matrix"] = {c.rows, c.cols};
      t["layout"] = layout_name(c.layout);
    }
    if (!c.eligible) t["reason"] = c.skip_reason;
    tensors.push_back(t);
  }
  nlohmann::json packed = nlohmann::json::array();
  for (size_t s = 0; s < model.shard_count(); ++s) {
    for (const auto& e : find_packed_nm(model.shard(s))) {
      packed.push_back({{"name", e.name},
                        {"format", "nmsparse"},
                        {"pattern", e.meta.pattern.to_string()},
                        {"axis", axis_name(e.meta.axis)},
                        {"shape", e.meta.tensor_shape}});
    }
    for (const auto& e : find_sparse24(model.shard(s))) {
      packed.push_back({{"name", e.name}, {"format", "sparse-24-bitmask"}, {"pattern", "2:4"}});
    }
  }
  if (!o.common.quiet && o.common.json_path != "-") {
    table.print(stdout);
    std::printf("\n%s: %zu shard(s), %zu tensors, %lld parameters, %.1f MB\n", o.input.c_str(),
                model.shard_count(), tensors.size(), static_cast<long long>(params), bytes / 1e6);
    std::printf(
        "%s (kept:group, density %.4f / sparsity %.4f): %lld tensors eligible, %lld "
        "parameters (%.1f %%)\n",
        pattern.to_string().c_str(), pattern.density(), pattern.sparsity(),
        static_cast<long long>(eligible), static_cast<long long>(eligible_params),
        params ? 100.0 * static_cast<double>(eligible_params) / static_cast<double>(params) : 0.0);
    for (const auto& p : packed) {
      std::printf("packed: %s (%s %s)\n", p["name"].get<std::string>().c_str(),
                  p["format"].get<std::string>().c_str(), p["pattern"].get<std::string>().c_str());
    }
  }
  report["input"] = o.input;
  report["shards"] = model.shard_count();
  report["pattern"] = pattern.to_string();
  report["parameters"] = params;
  report["eligible_parameters"] = eligible_params;
  report["bytes"] = bytes;
  report["tensors"] = tensors;
  report["packed"] = packed;
  write_json_report(o.common.json_path, report);
  return kExitOk;
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "info",
      "List a model's tensors (dtype, shape, matrix view) and which ones an N:M pattern "
      "can sparsify; --system describes this machine and build.");
  cmd->add_option("input", o->input, "Model (.safetensors, index.json or directory)");
  cmd->add_option("--nm", o->nm, "Pattern to check eligibility for (kept:group)")
      ->capture_default_str();
  cmd->add_flag("--system", o->system, "Print threads, compiler and build settings");
  cmd->add_flag("--diversity", o->diversity,
                "Print the mask diversity of one MxM tile for --nm: the exact number of row-wise "
                "and of transposable N:M masks (transposable up to M = 16)");
  o->common.add_to(*cmd, /*with_nonfinite=*/false);
  cmd->callback([o, &exit_code] { exit_code = run_info(*o); });
}

}  // namespace nms::cli
