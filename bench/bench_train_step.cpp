// Training step time of an N:M-sparse network (SparseLinear, kernel path) against the same network
// with dense torch::nn::Linear layers, in one process at the same thread count. A step is forward,
// backward and an SGD update on a random batch; the configurations are timed alternately (one step
// each per round, after warm-up rounds), and the table gives the median step time of each and the
// ratio to dense, plus where the sparse step's time goes (SparseLinearProfile).
//
//   bench_train_step [--model mlp|vit] [--hidden 4096] [--batch 512] [--nm 2:4] [--threads 1]
//                    [--rounds 15] [--configs bimask+mvue,transposable+mvue] [--json FILE]
//
// A configuration is weights+grads[+inputs]: transposable+mvue+bf16 runs the sparse forward and
// backward-data GEMMs on bf16 inputs (nm_gemm_bf16); the dense network stays fp32.
// mlp: 784 → hidden → hidden → 10 (ReLU). vit: the models.h vision transformer (patch 4, width
// 192, 4 blocks). The classifier head (out 10) stays dense in every configuration.
#include <dlfcn.h>
#include <malloc.h>
#include <omp.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "nmsparse/core/isa.h"
#include "nmsparse/core/threading.h"
#include "nmsparse/torch/models.h"
#include "nmsparse/torch/recipe.h"
#include "nmsparse/torch/sparse_linear.h"

namespace {

using nms::SparseLinearConfig;

void set_threads(int threads) {
  torch::set_num_threads(threads);
  omp_set_num_threads(threads);
  // Debian's LibTorch runs dense GEMMs in OpenBLAS, whose pthread pool ignores the two above.
  using SetThreads = void (*)(int);
  if (auto* f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    f(threads);
  }
}

struct Config {
  std::string name;  // "dense" or weights+grads
  SparseLinearConfig layer;
};

Config parse_config(const std::string& text, nms::NmPattern pattern) {
  Config c{text, {}};
  if (text == "dense") return c;
  // weights[+grads[+inputs]], e.g. bimask+mvue or transposable+mvue+bf16.
  std::vector<std::string> parts;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t plus = std::min(text.find('+', pos), text.size());
    parts.push_back(text.substr(pos, plus - pos));
    pos = plus + 1;
  }
  const auto w = nms::weight_mode_from_name(parts[0]);
  const auto g = nms::grad_mode_from_name(parts.size() > 1 ? parts[1] : "dense");
  const auto in = nms::gemm_inputs_from_name(parts.size() > 2 ? parts[2] : "fp32");
  if (!w || !g || !in || parts.size() > 3) {
    std::cerr << "bench_train_step: unknown configuration '" << text
              << "' (weights+grads[+inputs], e.g. bimask+mvue or transposable+mvue+bf16)\n";
    std::exit(2);
  }
  c.layer.inputs = *in;
  c.layer.weights = *w;
  c.layer.grads = *g;
  c.layer.pattern = pattern;
  c.layer.grad_pattern = *g == nms::GradMode::kMvueApprox24 ? nms::NmPattern{2, 4} : pattern;
  c.layer.path = nms::ExecPath::kKernels;
  return c;
}

struct Net {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

Net make_net(const std::string& model, int64_t hidden, const Config& config) {
  torch::manual_seed(1);
  nms::ModelConfig mc;
  if (model == "vit") {
    mc.kind = nms::ModelKind::kVit;
  } else {
    mc.kind = nms::ModelKind::kMlp;
    mc.mlp_hidden = {hidden, hidden};
  }
  auto net = nms::make_model(mc);
  if (config.name != "dense") {
    nms::Recipe recipe;
    recipe.defaults = config.layer;
    nms::sparsify(*net, recipe, net->head_name());
  }
  return {net, [net](const torch::Tensor& x) { return net->forward(x); }};
}

double train_step(Net& net, const torch::Tensor& x, const torch::Tensor& y) {
  const auto start = std::chrono::steady_clock::now();
  for (auto& p : net.module->parameters()) p.mutable_grad() = torch::Tensor();
  const torch::Tensor loss = torch::nn::functional::cross_entropy(net.forward(x), y);
  loss.backward();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net.module->parameters()) {
      if (p.grad().defined()) p.sub_(p.grad(), 1e-3);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  nms::reexec_with_thread_runtime_env(argv);  // both networks' runtimes, on 2+ threads
  std::string model = "mlp";
  int64_t hidden = 4096;
  int64_t batch = 512;
  std::string nm = "2:4";
  int threads = 1;
  int rounds = 15;
  std::string configs_text = "bimask+mvue,transposable+mvue";
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_train_step: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      model = next();
    else if (a == "--hidden")
      hidden = std::stoll(next());
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--nm")
      nm = next();
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--rounds")
      rounds = std::stoi(next());
    else if (a == "--configs")
      configs_text = next();
    else if (a == "--json")
      json_path = next();
    else {
      std::cerr << "bench_train_step: unknown argument '" << a << "'\n";
      return 2;
    }
  }
  if (model != "mlp" && model != "vit") {
    std::cerr << "bench_train_step: --model must be mlp or vit, not '" << model << "'\n";
    return 2;
  }
  set_threads(threads);
  // Keep freed blocks in the heap: glibc otherwise maps and unmaps every block over its mmap
  // threshold (at most 32 MB; a 4096 x 4096 gradient is 64 MB), and the page faults of touching
  // fresh pages cost ~7 % of a step, dense or sparse alike.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  const nms::NmPattern pattern = nms::NmPattern::parse(nm);

  std::vector<Config> configs{{"dense", {}}};
  for (size_t pos = 0; pos <= configs_text.size();) {
    const size_t comma = std::min(configs_text.find(',', pos), configs_text.size());
    configs.push_back(parse_config(configs_text.substr(pos, comma - pos), pattern));
    pos = comma + 1;
  }
  std::vector<Net> nets;
  for (const Config& c : configs) nets.push_back(make_net(model, hidden, c));

  torch::manual_seed(2);
  const torch::Tensor x = torch::rand({batch, 1, 28, 28});
  const torch::Tensor y = torch::randint(0, 10, {batch}, torch::kInt64);
  const int warmup = 2;
  std::vector<std::vector<double>> times(configs.size());
  std::vector<nms::SparseLinearProfile> profiles(configs.size());
  for (int round = 0; round < warmup + rounds; ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      nms::sparse_linear_profile_reset();
      const double t = train_step(nets[c], x, y);
      if (round < warmup) continue;
      times[c].push_back(t);
      const nms::SparseLinearProfile p = nms::sparse_linear_profile();
      profiles[c].forward_gemm += p.forward_gemm / rounds;
      profiles[c].backward_data_gemm += p.backward_data_gemm / rounds;
      profiles[c].weight_grad_gemm += p.weight_grad_gemm / rounds;
      profiles[c].mask_update += p.mask_update / rounds;
      profiles[c].operand_prep += p.operand_prep / rounds;
    }
  }

  const double dense_ms = 1e3 * nms::bench::median(times[0]);
  std::printf(
      "model %s%s, batch %lld, %s, %d thread(s), isa %s, %d rounds\n", model.c_str(),
      model == "mlp"
          ? (" 784-" + std::to_string(hidden) + "-" + std::to_string(hidden) + "-10").c_str()
          : "",
      static_cast<long long>(batch), nm.c_str(), threads,
      std::string(nms::isa_name(nms::isa_active())).c_str(), rounds);
  std::printf("%-20s %10s %8s | mean ms in layers: %7s %7s %7s %7s %7s\n", "config", "step ms",
              "speedup", "fwd", "bwd-dat", "wgrad", "masks", "prep");
  std::string json = "{\"model\": \"" + model + "\", \"hidden\": " + std::to_string(hidden) +
                     ", \"batch\": " + std::to_string(batch) + ", \"pattern\": \"" + nm +
                     "\", \"threads\": " + std::to_string(threads) + ", \"results\": [";
  for (size_t c = 0; c < configs.size(); ++c) {
    const double ms = 1e3 * nms::bench::median(times[c]);
    const nms::SparseLinearProfile& p = profiles[c];
    std::printf("%-20s %10.2f %7.2fx | %25.2f %7.2f %7.2f %7.2f %7.2f\n", configs[c].name.c_str(),
                ms, dense_ms / ms, 1e3 * p.forward_gemm, 1e3 * p.backward_data_gemm,
                1e3 * p.weight_grad_gemm, 1e3 * p.mask_update, 1e3 * p.operand_prep);
    json += std::string(c ? ", " : "") + "{\"config\": \"" + configs[c].name +
            "\", \"step_ms\": " + std::to_string(ms) +
            ", \"speedup\": " + std::to_string(dense_ms / ms) +
            ", \"forward_gemm_ms\": " + std::to_string(1e3 * p.forward_gemm) +
            ", \"backward_data_gemm_ms\": " + std::to_string(1e3 * p.backward_data_gemm) +
            ", \"weight_grad_gemm_ms\": " + std::to_string(1e3 * p.weight_grad_gemm) +
            ", \"mask_update_ms\": " + std::to_string(1e3 * p.mask_update) +
            ", \"operand_prep_ms\": " + std::to_string(1e3 * p.operand_prep) + "}";
  }
  json += "]}\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
