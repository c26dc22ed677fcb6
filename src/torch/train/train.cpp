// The training loop: data batches, the optimisers with explicit state, epochs with evaluation,
// checkpoints, resume and the report (see train.h).
#include "nmsparse/torch/train.h"

#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>

#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"
#include "nmsparse/data/text_corpus.h"
#include "nmsparse/io/atomic_file.h"
#include "torch/train/train_data.h"

namespace nms {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kDefaultCharLmSteps = 200;
constexpr int64_t kDefaultValWindows = 256;
constexpr const char* kCheckpointName = "checkpoint.safetensors";
constexpr const char* kMetaConfig = "nmsparse.train.config";
constexpr const char* kMetaEpoch = "nmsparse.train.epoch";
constexpr const char* kMetaHistory = "nmsparse.train.history";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

OptimizerKind resolved_optimizer(const TrainOptions& o) {
  if (o.optimizer) return *o.optimizer;
  return o.model.kind == ModelKind::kMlp ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
}

// --- data ---------------------------------------------------------------------------------------

// Fisher-Yates with the draws of CounterRng(seed, epoch): a pure function of (n, seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  const CounterRng rng(seed, static_cast<uint64_t>(epoch));
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.uniform_double(static_cast<uint64_t>(i)) *
                                  static_cast<double>(i + 1));
    j = std::min(j, i);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

void restore_state(const Checkpoint& c, const std::string& key, torch::Tensor& dst) {
  const auto it = c.tensors.find(key);
  NMS_CHECK(it != c.tensors.end(), "the checkpoint has no optimiser state '", key, "'");
  NMS_CHECK(it->second.sizes() == dst.sizes() && it->second.scalar_type() == dst.scalar_type(),
            "optimiser state '", key, "' does not match its parameter");
  dst.copy_(it->second);
}

struct EvalMetrics {
  double loss = 0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN for charlm
};

// Test cross-entropy and accuracy (mlp, vit) or validation loss over the first windows of the
// validation part (charlm), in eval mode without gradients.
EvalMetrics evaluate(TrainableModel& model, const TrainOptions& options,
                     const ImageTensors& test_set, const TextTensors& text) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss_total = 0;
  int64_t count = 0;
  int64_t correct = 0;
  EvalMetrics m;
  if (options.model.kind == ModelKind::kCharLm) {
    const int64_t context = options.model.context;
    const int64_t available = (static_cast<int64_t>(text.ids.size()) - text.split - 1) / context;
    const int64_t windows =
        std::min(available, options.limit_test > 0 ? options.limit_test : kDefaultValWindows);
    for (int64_t w0 = 0; w0 < windows; w0 += options.batch) {
      std::vector<int64_t> starts;
      for (int64_t w = w0; w < std::min(windows, w0 + options.batch); ++w) {
        starts.push_back(text.split + w * context);
      }
      const auto [x, y] = text_batch(text.ids, starts, context);
      const auto b = static_cast<int64_t>(starts.size());
      loss_total += model.loss(model.forward(x), y).item<double>() * static_cast<double>(b);
      count += b;
    }
  } else {
    const int64_t n = test_set.x.size(0);
    const int64_t eval_batch = std::max<int64_t>(options.batch, 256);
    for (int64_t i = 0; i < n; i += eval_batch) {
      const int64_t b = std::min(eval_batch, n - i);
      const torch::Tensor x = test_set.x.narrow(0, i, b);
      const torch::Tensor y = test_set.y.narrow(0, i, b);
      const torch::Tensor logits = model.forward(x);
      loss_total += model.loss(logits, y).item<double>() * static_cast<double>(b);
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
      count += b;
    }
    m.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  }
  m.loss = loss_total / static_cast<double>(std::max<int64_t>(count, 1));
  return m;
}

// Copies the parameters (not the buffers) of `model` from the "model.<name>" tensors of `file`.
void initialise_parameters(TrainableModel& model, const fs::path& file) {
  NMS_CHECK(fs::exists(file), "--init: ", file.string(), " does not exist");
  const Checkpoint c = read_checkpoint(file);
  try {
    module_parameters_from(model, c);
  } catch (const Error& e) {
    NMS_THROW("cannot initialise the model from ", file.string(), ": ", e.what());
  }
}

// --- optimisers ---------------------------------------------------------------------------------

class Optimizer {
 public:
  Optimizer(OptimizerKind kind, torch::nn::Module& model, double weight_decay)
      : kind_(kind), weight_decay_(weight_decay) {
    for (auto& item : model.named_parameters(/*recurse=*/true)) {
      if (!item.value().defined() || !item.value().requires_grad()) continue;
      Slot s{item.key(), item.value(), {}, {}};
      if (kind_ == OptimizerKind::kSgd) {
        s.a = torch::zeros_like(s.param);
      } else {
        s.a = torch::zeros_like(s.param);
        s.b = torch::zeros_like(s.param);
      }
      slots_.push_back(std::move(s));
    }
  }

  void zero_grad() {
    for (Slot& s : slots_) {
      if (s.param.grad().defined()) s.param.mutable_grad().zero_();
    }
  }

  void step(double lr) {
    torch::NoGradGuard no_grad;
    ++steps_;
    if (kind_ == OptimizerKind::kSgd) {
      for (Slot& s : slots_) {
        if (!s.param.grad().defined()) continue;
        torch::Tensor g = s.param.grad();
        if (weight_decay_ > 0 && s.param.dim() >= 2) g = g.add(s.param, weight_decay_);
        s.a.mul_(kMomentum).add_(g);
        s.param.add_(s.a, -lr);
      }
      return;
    }
    // AdamW with global-norm clipping at kClip.
    double sq = 0;
    for (Slot& s : slots_) {
      if (s.param.grad().defined()) sq += s.param.grad().pow(2).sum().item<double>();
    }
    const double norm = std::sqrt(sq);
    const double clip = norm > kClip ? kClip / (norm + 1e-6) : 1.0;
    const double bc1 = 1.0 - std::pow(kBeta1, static_cast<double>(steps_));
    const double bc2 = 1.0 - std::pow(kBeta2, static_cast<double>(steps_));
    for (Slot& s : slots_) {
      if (!s.param.grad().defined()) continue;
      torch::Tensor g = clip != 1.0 ? s.param.grad().mul(clip) : s.param.grad();
      if (weight_decay_ > 0 && s.param.dim() >= 2) s.param.mul_(1.0 - lr * weight_decay_);
      s.a.mul_(kBeta1).add_(g, 1.0 - kBeta1);
      s.b.mul_(kBeta2).addcmul_(g, g, 1.0 - kBeta2);
      const torch::Tensor denom = (s.b / bc2).sqrt_().add_(kEps);
      s.param.addcdiv_(s.a, denom, -lr / bc1);
    }
  }

  void state_to(Checkpoint& c) const {
    for (const Slot& s : slots_) {
      if (kind_ == OptimizerKind::kSgd) {
        c.tensors["optim." + s.name + ".momentum"] = s.a.clone();
      } else {
        c.tensors["optim." + s.name + ".exp_avg"] = s.a.clone();
        c.tensors["optim." + s.name + ".exp_avg_sq"] = s.b.clone();
      }
    }
    c.tensors["optim.step"] = torch::full({}, steps_, torch::kLong);
  }

  void state_from(const Checkpoint& c) {
    torch::NoGradGuard no_grad;
    for (Slot& s : slots_) {
      if (kind_ == OptimizerKind::kSgd) {
        restore_state(c, "optim." + s.name + ".momentum", s.a);
      } else {
        restore_state(c, "optim." + s.name + ".exp_avg", s.a);
        restore_state(c, "optim." + s.name + ".exp_avg_sq", s.b);
      }
    }
    const auto it = c.tensors.find("optim.step");
    NMS_CHECK(it != c.tensors.end(), "the checkpoint has no 'optim.step'");
    steps_ = it->second.item<int64_t>();
  }

 private:
  static constexpr double kMomentum = 0.9;
  static constexpr double kBeta1 = 0.9;
  static constexpr double kBeta2 = 0.999;
  static constexpr double kEps = 1e-8;
  static constexpr double kClip = 1.0;
  struct Slot {
    std::string name;
    torch::Tensor param;
    torch::Tensor a;  // sgd: momentum; adamw: first moment
    torch::Tensor b;  // adamw: second moment
  };
  OptimizerKind kind_;
  double weight_decay_;
  int64_t steps_ = 0;
  std::vector<Slot> slots_;
};

double scheduled_lr(double base, int64_t step, int64_t total, int64_t warmup) {
  if (warmup > 0 && step < warmup) return base * static_cast<double>(step + 1) / warmup;
  const double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
  const double t = static_cast<double>(step - warmup) / span;
  return base * 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(t, 1.0)));
}

// --- JSON ---------------------------------------------------------------------------------------

json finite_or_null(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

json epoch_json(const EpochMetrics& m, bool charlm) {
  json j = {{"epoch", m.epoch},
            {"steps", m.steps},
            {"train_loss", m.train_loss},
            {charlm ? "val_loss" : "test_loss", m.test_loss},
            {"lr", m.lr},
            {"seconds", m.seconds},
            {"eval_seconds", m.eval_seconds},
            {"step_ms", m.step_ms},
            {"profile_seconds",
             {{"gemm", m.profile.gemm}, {"mask", m.profile.mask}, {"rest", m.profile.rest}}}};
  if (!charlm) j["test_accuracy"] = finite_or_null(m.test_accuracy);
  return j;
}

EpochMetrics epoch_from_json(const json& j, bool charlm) {
  EpochMetrics m;
  m.epoch = j.at("epoch").get<int64_t>();
  m.steps = j.at("steps").get<int64_t>();
  m.train_loss = j.at("train_loss").get<double>();
  m.test_loss = j.at(charlm ? "val_loss" : "test_loss").get<double>();
  m.test_accuracy = charlm || j.at("test_accuracy").is_null()
                        ? std::numeric_limits<double>::quiet_NaN()
                        : j.at("test_accuracy").get<double>();
  m.lr = j.at("lr").get<double>();
  m.seconds = j.at("seconds").get<double>();
  m.eval_seconds = j.at("eval_seconds").get<double>();
  m.step_ms = j.at("step_ms").get<double>();
  const json& p = j.at("profile_seconds");
  m.profile = {p.at("gemm").get<double>(), p.at("mask").get<double>(), p.at("rest").get<double>()};
  return m;
}

json history_json(const std::vector<EpochMetrics>& history, bool charlm) {
  json h = json::array();
  for (const EpochMetrics& m : history) h.push_back(epoch_json(m, charlm));
  return h;
}

json sparsify_json(const SparsifyReport& r) {
  json s = json::array();
  for (const auto& [name, config] : r.sparsified) s.push_back({{"name", name}, {"config", config}});
  json k = json::array();
  for (const auto& [name, reason] : r.skipped) k.push_back({{"name", name}, {"reason", reason}});
  return {{"sparsified", s}, {"skipped", k}};
}

void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j.dump();
  }
}

// The first field where two config JSONs differ, as "field (checkpoint: a, this run: b)".
std::string config_difference(const std::string& saved, const std::string& wanted) {
  std::map<std::string, std::string> a;
  std::map<std::string, std::string> b;
  flatten(json::parse(saved), "", a);
  flatten(json::parse(wanted), "", b);
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    const std::string old = it == a.end() ? "(absent)" : it->second;
    if (old != value) return key + " (checkpoint: " + old + ", this run: " + value + ")";
  }
  for (const auto& [key, value] : a) {
    if (!b.contains(key)) return key + " (checkpoint: " + value + ", this run: (absent))";
  }
  return {};
}

}  // namespace

// --- public -------------------------------------------------------------------------------------

std::string_view optimizer_name(OptimizerKind kind) {
  return kind == OptimizerKind::kSgd ? "sgd" : "adamw";
}

std::optional<OptimizerKind> optimizer_from_name(std::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  return std::nullopt;
}

void TrainOptions::validate() const {
  ModelConfig checked = model;
  // charlm's vocabulary comes from the corpus in train(); 0 means "not known yet".
  if (checked.kind == ModelKind::kCharLm && checked.vocab == 0) checked.vocab = 256;
  checked.validate();
  recipe.defaults.validate();
  NMS_CHECK(epochs >= 0, "epochs (", epochs, ") must be >= 0 (0 = evaluate only)");
  NMS_CHECK(epochs >= 1 || resume_dir.empty(),
            "epochs 0 evaluates a model and cannot resume a run (resume_dir ", resume_dir.string(),
            ")");
  NMS_CHECK(batch >= 1, "batch (", batch, ") must be at least 1");
  NMS_CHECK(lr >= 0 && std::isfinite(lr), "lr (", lr, ") must be a finite number >= 0");
  NMS_CHECK(std::isfinite(weight_decay), "weight_decay (", weight_decay, ") must be finite");
  NMS_CHECK(limit_train >= 0, "limit_train (", limit_train, ") must be >= 0");
  NMS_CHECK(limit_test >= 0, "limit_test (", limit_test, ") must be >= 0");
  NMS_CHECK(steps_per_epoch >= 0, "steps_per_epoch (", steps_per_epoch, ") must be >= 0");
  NMS_CHECK(stop_after_epochs >= 0, "stop_after_epochs (", stop_after_epochs, ") must be >= 0");
  NMS_CHECK(!out_dir.empty(), "an output directory is required");
}

std::string TrainOptions::config_json() const {
  const OptimizerKind opt = resolved_optimizer(*this);
  const bool sgd = opt == OptimizerKind::kSgd;
  const double base_lr = lr > 0 ? lr : (sgd ? 0.05 : 1e-3);
  const double wd = weight_decay >= 0 ? weight_decay : (sgd ? 5e-4 : 0.05);
  json m = {{"kind", std::string(model_kind_name(model.kind))}};
  if (model.kind == ModelKind::kMlp) {
    m["hidden"] = model.mlp_hidden;
  } else {
    m["width"] = model.width;
    m["blocks"] = model.blocks;
    m["heads"] = model.heads;
    m["mlp_ratio"] = model.mlp_ratio;
    if (model.kind == ModelKind::kVit) m["patch"] = model.vit_patch;
    if (model.kind == ModelKind::kCharLm) {
      m["context"] = model.context;
      m["vocab"] = model.vocab;
    }
  }
  json j = {{"model", m},
            {"recipe", json::parse(recipe_to_json(recipe))},
            {"epochs", epochs},
            {"batch", batch},
            {"optimizer", std::string(optimizer_name(opt))},
            {"lr", base_lr},
            {"weight_decay", wd},
            {"warmup_steps", warmup_steps},
            {"schedule", "cosine"},
            {"seed", seed},
            {"normalize", normalize},
            {"limit_train", limit_train},
            {"limit_test", limit_test},
            {"steps_per_epoch", steps_per_epoch}};
  if (!init_path.empty()) j["init"] = init_path.string();
  return j.dump();
}

std::string TrainReport::to_json() const {
  const json config = json::parse(config_json);
  const bool charlm = config.at("model").at("kind") == "charlm";
  double mean = 0;
  json j = {{"command", "train"},
            {"status", status},
            {"config", config},
            {"recipe", json::parse(recipe_json)},
            {"sparsify", sparsify_json(sparsify)},
            {"history", history_json(history, charlm)},
            {"epochs_done", history.empty() ? 0 : history.back().epoch},
            {"resumed_from_epoch", resumed_from_epoch},
            {"mean_step_ms", mean_step_ms},
            {"seconds", seconds},
            {"out_dir", out_dir.string()}};
  (void)mean;
  if (charlm) {
    j["val_loss"] = finite_or_null(final_test_loss);
  } else {
    j["test_accuracy"] = finite_or_null(final_test_accuracy);
    j["test_loss"] = finite_or_null(final_test_loss);
  }
  if (!plot_warning.empty()) j["plot_warning"] = plot_warning;
  return j.dump(2) + "\n";
}

void set_training_threads(int threads) {
  if (threads <= 0) return;
  torch::set_num_threads(threads);
  omp_set_num_threads(threads);
  // Debian's OpenBLAS (LibTorch's dense GEMMs) runs its own pthreads, which ignore the above.
  using SetThreads = void (*)(int);
  if (void* sym = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
    reinterpret_cast<SetThreads>(sym)(threads);
  }
}

TrainData load_default_train_data(const TrainOptions& options) {
  TrainData data;
  if (options.model.kind == ModelKind::kCharLm) {
    const fs::path path = austen_default_path();
    NMS_CHECK(fs::exists(path), "the Jane Austen corpus is not at ", path.string(),
              ": run scripts/fetch-austen.sh (or scripts/install-deps.sh)");
    data.text = load_austen(path);
    return data;
  }
  const fs::path dir = fashion_mnist_default_dir();
  NMS_CHECK(
      fs::exists(dir / "train-images-idx3-ubyte.gz") || fs::exists(dir / "train-images-idx3-ubyte"),
      "Fashion-MNIST is not in ", dir.string(),
      ": apt-get install dataset-fashion-mnist (or run scripts/install-deps.sh), or set "
      "NMSPARSE_FASHION_MNIST to a directory with its IDX files");
  data.train_images = load_fashion_mnist(dir, DataSplit::kTrain);
  data.test_images = load_fashion_mnist(dir, DataSplit::kTest);
  return data;
}

TrainReport train(const TrainOptions& options_in, const TrainData& data,
                  const TrainCallbacks& callbacks) {
  const double t_start = now_seconds();
  options_in.validate();
  TrainOptions options = options_in;
  const bool charlm = options.model.kind == ModelKind::kCharLm;
  set_training_threads(options.threads);

  // Data.
  ImageTensors train_set;
  ImageTensors test_set;
  TextTensors text;
  int64_t steps = 0;
  if (charlm) {
    text = text_tensors(data.text, options.model.context);
    options.model.vocab = text.vocab;
    steps = options.steps_per_epoch > 0 ? options.steps_per_epoch : kDefaultCharLmSteps;
  } else {
    train_set =
        image_tensors(data.train_images, options.limit_train, options.normalize, "training");
    test_set = image_tensors(data.test_images, options.limit_test, options.normalize, "test");
    const int64_t n = train_set.x.size(0);
    steps = std::max<int64_t>(n / options.batch, 1);
    if (options.steps_per_epoch > 0) steps = std::min(steps, options.steps_per_epoch);
  }
  options.model.validate();

  const OptimizerKind opt_kind = resolved_optimizer(options);
  const bool sgd = opt_kind == OptimizerKind::kSgd;
  const double base_lr = options.lr > 0 ? options.lr : (sgd ? 0.05 : 1e-3);
  const double wd = options.weight_decay >= 0 ? options.weight_decay : (sgd ? 5e-4 : 0.05);
  const int64_t total_steps = steps * options.epochs;
  const int64_t warmup = options.warmup_steps >= 0
                             ? options.warmup_steps
                             : (sgd ? 0 : std::min<int64_t>(200, total_steps / 20));

  TrainReport report;
  report.config_json = options.config_json();
  report.recipe_json = recipe_to_json(options.recipe);
  report.out_dir = options.out_dir;

  // Model, recipe.
  torch::manual_seed(options.seed);
  const std::shared_ptr<TrainableModel> model = make_model(options.model);
  report.sparsify = sparsify(*model, options.recipe, model->head_name());
  const SparseLinearConfig& d = options.recipe.defaults;
  const bool wants_sparse = d.weights != WeightMode::kDense || d.grads != GradMode::kDense ||
                            !options.recipe.layer_overrides_json.empty();
  if (wants_sparse && report.sparsify.sparsified.empty()) {
    std::string reasons;
    for (const auto& [name, reason] : report.sparsify.skipped) {
      reasons += (reasons.empty() ? "" : "; ") + name + ": " + reason;
    }
    NMS_THROW("the recipe (", d.describe(), ") fits no layer of the ",
              model_kind_name(options.model.kind), " model: ", reasons);
  }
  if (callbacks.on_sparsify) callbacks.on_sparsify(report.sparsify);
  Optimizer optimizer(opt_kind, *model, wd);
  // --init: parameters of a fresh run from a file (a resume takes everything from its checkpoint).
  if (!options.init_path.empty() && options.resume_dir.empty()) {
    initialise_parameters(*model, options.init_path);
  }

  // Resume.
  fs::create_directories(options.out_dir);
  int64_t first_epoch = 1;
  if (!options.resume_dir.empty()) {
    const fs::path file = fs::is_directory(options.resume_dir)
                              ? options.resume_dir / kCheckpointName
                              : options.resume_dir;
    NMS_CHECK(fs::exists(file), "no checkpoint to resume from: ", file.string(), " does not exist");
    const Checkpoint c = read_checkpoint(file);
    const auto cfg = c.metadata.find(kMetaConfig);
    const auto ep = c.metadata.find(kMetaEpoch);
    const auto hist = c.metadata.find(kMetaHistory);
    NMS_CHECK(cfg != c.metadata.end() && ep != c.metadata.end() && hist != c.metadata.end(),
              file.string(), " is not a training checkpoint (no ", kMetaConfig, " metadata)");
    const std::string diff = config_difference(cfg->second, report.config_json);
    NMS_CHECK(diff.empty(), "cannot resume from ", file.string(),
              ": it was trained with a different config: ", diff);
    module_state_from(*model, c);
    optimizer.state_from(c);
    for (const json& e : json::parse(hist->second)) {
      report.history.push_back(epoch_from_json(e, charlm));
    }
    report.resumed_from_epoch = std::stoll(ep->second);
    first_epoch = report.resumed_from_epoch + 1;
  }

  auto write_report = [&] {
    report.seconds = now_seconds() - t_start;
    double sum = 0;
    for (const EpochMetrics& m : report.history) sum += m.step_ms;
    report.mean_step_ms = report.history.empty() ? 0 : sum / report.history.size();
    if (!report.history.empty()) {
      report.final_test_accuracy = report.history.back().test_accuracy;
      report.final_test_loss = report.history.back().test_loss;
    }
    write_file_atomic(options.out_dir / "recipe.json", report.recipe_json + "\n");
    write_file_atomic(options.out_dir / "report.json", report.to_json());
  };

  // epochs 0: evaluate only; no checkpoint, an empty history, the metrics in the report.
  if (options.epochs == 0) {
    const EvalMetrics e = evaluate(*model, options, test_set, text);
    report.status = "evaluated";
    report.final_test_accuracy = e.accuracy;
    report.final_test_loss = e.loss;
    write_report();
    return report;
  }

  const int64_t last_epoch = options.stop_after_epochs > 0
                                 ? std::min(options.epochs, options.stop_after_epochs)
                                 : options.epochs;
  for (int64_t epoch = first_epoch; epoch <= last_epoch; ++epoch) {
    model->train();
    sparse_linear_profile_reset();
    std::vector<int64_t> perm;
    if (!charlm) perm = epoch_permutation(train_set.x.size(0), options.seed, epoch);
    const int64_t n_train = charlm ? 0 : train_set.x.size(0);
    const int64_t batch = charlm ? options.batch : std::min(options.batch, n_train);
    EpochMetrics m;
    m.epoch = epoch;
    m.steps = steps;
    double loss_sum = 0;
    const double t_epoch = now_seconds();
    for (int64_t k = 0; k < steps; ++k) {
      const double t_step = now_seconds();
      const int64_t global = (epoch - 1) * steps + k;
      torch::Tensor x;
      torch::Tensor y;
      if (charlm) {
        const std::vector<int64_t> starts =
            charlm_window_starts(options.seed, global, batch, text.split, options.model.context);
        std::tie(x, y) = text_batch(text.ids, starts, options.model.context);
      } else {
        const torch::Tensor index =
            torch::from_blob(perm.data() + k * batch, {batch}, torch::kLong).clone();
        x = train_set.x.index_select(0, index);
        y = train_set.y.index_select(0, index);
      }
      const double lr = scheduled_lr(base_lr, global, total_steps, warmup);
      optimizer.zero_grad();
      torch::Tensor loss = model->loss(model->forward(x), y);
      const double value = loss.item<double>();
      if (!std::isfinite(value)) {
        report.status = "diverged";
        write_report();
        NMS_THROW("the loss is ", value, " at epoch ", epoch, " step ", k + 1, " (lr ", lr,
                  "); training stopped. ",
                  epoch > 1 || report.resumed_from_epoch > 0
                      ? "The checkpoint of the last good epoch (" + std::to_string(epoch - 1) +
                            ") is kept in " + (options.out_dir / kCheckpointName).string()
                      : std::string("No epoch completed, so there is no checkpoint"),
                  ". Try a smaller --lr.");
      }
      loss.backward();
      optimizer.step(lr);
      loss_sum += value;
      m.lr = lr;
      if (callbacks.on_step) {
        callbacks.on_step({epoch, options.epochs, k + 1, steps,
                           loss_sum / static_cast<double>(k + 1), now_seconds() - t_step});
      }
    }
    m.seconds = now_seconds() - t_epoch;
    m.train_loss = loss_sum / static_cast<double>(steps);
    m.step_ms = 1000.0 * m.seconds / static_cast<double>(steps);
    const SparseLinearProfile p = sparse_linear_profile();
    m.profile.gemm = p.forward_gemm + p.backward_data_gemm + p.weight_grad_gemm;
    m.profile.mask = p.mask_update + p.operand_prep;
    m.profile.rest = std::max(0.0, m.seconds - m.profile.gemm - m.profile.mask);

    // Evaluation.
    const double t_eval = now_seconds();
    const EvalMetrics e = evaluate(*model, options, test_set, text);
    m.test_loss = e.loss;
    m.test_accuracy = e.accuracy;
    m.eval_seconds = now_seconds() - t_eval;
    report.history.push_back(m);

    // Checkpoint, then the report.
    Checkpoint c;
    module_state_to(*model, c);
    optimizer.state_to(c);
    c.metadata[kMetaConfig] = report.config_json;
    c.metadata[kMetaEpoch] = std::to_string(epoch);
    c.metadata[kMetaHistory] = history_json(report.history, charlm).dump();
    write_checkpoint(options.out_dir / kCheckpointName, c);
    report.status = epoch == options.epochs ? "finished" : "running";
    write_report();
    if (callbacks.on_epoch) callbacks.on_epoch(m);
  }

  report.status = last_epoch >= options.epochs ? "finished" : "stopped";
  if (options.plot && !report.history.empty()) {
    report.plot_warning =
        plot_histories({{"", report.history}}, charlm, options.out_dir / "training.png");
  }
  write_report();
  return report;
}

}  // namespace nms
