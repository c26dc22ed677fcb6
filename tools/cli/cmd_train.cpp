// nmsparse train: sparse training of a small model (mlp / vit on Fashion-MNIST, charlm on Jane
// Austen) with SparseLinear layers, per flags or a recipe file; --compare runs several
// (weights, grads) configurations and tabulates them. The loop lives in nmsparse_torch (train.h).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "nmsparse/core/error.h"
#include "nmsparse/torch/train.h"
#include "report.h"

namespace nms::cli {
namespace {

struct TrainCliOptions {
  std::string model = "mlp";
  std::string hidden;  // mlp hidden sizes, comma-separated
  int64_t width = 0;
  int64_t blocks = 0;
  int64_t context = 0;
  int64_t heads = 0;
  std::string nm = "2:4";
  std::string weights = "dense";
  std::string grads = "dense";
  std::string grad_nm = "2:4";
  std::string path = "kernels";
  std::string solver = "exact";
  std::string inputs = "fp32";
  float decay = SparseLinearConfig{}.decay;
  std::string recipe;
  std::string compare;
  std::string optimizer;
  int64_t epochs = 10;
  int64_t batch = 128;
  double lr = 0;
  uint64_t seed = 0;
  int threads = 0;
  std::string out;
  std::string resume;
  std::string init;
  int64_t limit_train = 0;
  int64_t limit_test = 0;
  int64_t steps_per_epoch = 0;
  int64_t stop_after = 0;
  bool no_plot = false;
  bool no_normalize = false;
  std::string json_path;
  bool quiet = false;
};

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    NMS_CHECK(used == item.size() && !item.empty() && v > 0, "--hidden: '", item,
              "' is not a positive integer (expected e.g. 1024,1024)");
    sizes.push_back(v);
    pos = comma + 1;
    if (comma == text.size()) break;
  }
  return sizes;
}

TrainOptions build_options(const TrainCliOptions& o) {
  TrainOptions t;
  const auto kind = model_kind_from_name(o.model);
  NMS_CHECK(kind.has_value(), "unknown --model '", o.model, "' (expected mlp, vit or charlm)");
  t.model.kind = *kind;
  if (*kind == ModelKind::kCharLm) {  // the small char-GPT of docs/training.md
    t.model.width = 128;
    t.model.heads = 4;
  }
  if (!o.hidden.empty()) t.model.mlp_hidden = parse_sizes(o.hidden);
  if (o.width > 0) t.model.width = o.width;
  if (o.blocks > 0) t.model.blocks = o.blocks;
  if (o.context > 0) t.model.context = o.context;
  if (o.heads > 0) t.model.heads = o.heads;
  if (!o.recipe.empty()) {
    t.recipe = load_recipe(o.recipe);
  } else {
    const auto weights = weight_mode_from_name(o.weights);
    NMS_CHECK(weights.has_value(), "unknown --weights '", o.weights,
              "' (expected dense, nm, transposable or bimask)");
    const auto grads = grad_mode_from_name(o.grads);
    NMS_CHECK(grads.has_value(), "unknown --grads '", o.grads,
              "' (expected dense, mvue, mvue-approx24 or topn)");
    const auto path = exec_path_from_name(o.path);
    NMS_CHECK(path.has_value(), "unknown --path '", o.path, "' (expected kernels or reference)");
    const auto solver = transposable_solver_from_name(o.solver);
    NMS_CHECK(solver.has_value(), "unknown --solver '", o.solver,
              "' (expected exact, greedy or entropic)");
    SparseLinearConfig& d = t.recipe.defaults;
    d.weights = *weights;
    d.grads = *grads;
    try {
      d.pattern = NmPattern::parse(o.nm);
    } catch (const Error& e) {
      NMS_THROW("--nm '", o.nm, "': ", e.what());
    }
    try {
      d.grad_pattern = NmPattern::parse(o.grad_nm);
    } catch (const Error& e) {
      NMS_THROW("--grad-nm '", o.grad_nm, "': ", e.what());
    }
    const auto inputs = gemm_inputs_from_name(o.inputs);
    NMS_CHECK(inputs.has_value(), "unknown --inputs '", o.inputs, "' (expected fp32 or bf16)");
    d.path = *path;
    d.solver = *solver;
    d.inputs = *inputs;
    d.decay = o.decay;
    d.seed = o.seed;
  }
  if (!o.optimizer.empty()) {
    t.optimizer = optimizer_from_name(o.optimizer);
    NMS_CHECK(t.optimizer.has_value(), "unknown --optimizer '", o.optimizer,
              "' (expected sgd or adamw)");
  }
  t.epochs = o.epochs;
  t.batch = o.batch;
  t.lr = o.lr;
  t.seed = o.seed;
  t.threads = o.threads;
  t.normalize = !o.no_normalize;
  t.limit_train = o.limit_train;
  t.limit_test = o.limit_test;
  t.steps_per_epoch = o.steps_per_epoch;
  t.stop_after_epochs = o.stop_after;
  t.out_dir = o.out;
  t.resume_dir = o.resume;
  t.init_path = o.init;
  t.plot = !o.no_plot;
  t.validate();
  return t;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld", s / 60, s % 60);
  return text;
}

// Progress: a bar on a terminal, otherwise nothing per step (the epoch lines say it all).
struct TrainPrinter {
  bool tty = false;
  bool quiet = false;
  bool charlm = false;
  std::string prefix;  // "[2/4 bimask+mvue] " in a comparison
  double elapsed_in_epoch = 0;

  void sparsify(const SparsifyReport& r) const {
    if (quiet) return;
    for (const auto& [name, config] : r.sparsified) {
      std::printf("%ssparse  %-24s %s\n", prefix.c_str(), name.c_str(), config.c_str());
    }
    for (const auto& [name, reason] : r.skipped) {
      std::printf("%sdense   %-24s (skipped: %s)\n", prefix.c_str(), name.c_str(), reason.c_str());
    }
    std::fflush(stdout);
  }

  void step(const StepProgress& p) {
    if (quiet || !tty) return;
    elapsed_in_epoch = p.step == 1 ? p.step_seconds : elapsed_in_epoch + p.step_seconds;
    if (p.step % 4 != 0 && p.step != p.steps) return;
    const double per_step = elapsed_in_epoch / static_cast<double>(p.step);
    const double eta = per_step * static_cast<double>(p.steps - p.step);
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * p.step / p.steps);
    std::fprintf(stderr,
                 "\r\033[K%sepoch %lld/%lld [%s%s] %lld/%lld loss %.4f  %.1f ms/step  ETA %s",
                 prefix.c_str(), static_cast<long long>(p.epoch), static_cast<long long>(p.epochs),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                 static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss,
                 1000.0 * per_step, format_duration(eta).c_str());
    std::fflush(stderr);
  }

  void epoch(const EpochMetrics& m, int64_t epochs) const {
    if (tty && !quiet) std::fprintf(stderr, "\r\033[K");
    if (quiet) return;
    const double total = std::max(m.seconds, 1e-12);
    char metric[64];
    if (charlm) {
      std::snprintf(metric, sizeof metric, "val loss %.4f", m.test_loss);
    } else {
      std::snprintf(metric, sizeof metric, "test loss %.4f  acc %.2f%%", m.test_loss,
                    100.0 * m.test_accuracy);
    }
    std::printf(
        "%sepoch %lld/%lld  train loss %.4f  %s  %.1f s  %.2f ms/step  (gemm %.0f%%, mask %.0f%%, "
        "rest %.0f%%)\n",
        prefix.c_str(), static_cast<long long>(m.epoch), static_cast<long long>(epochs),
        m.train_loss, metric, m.seconds, m.step_ms, 100.0 * m.profile.gemm / total,
        100.0 * m.profile.mask / total, 100.0 * m.profile.rest / total);
    std::fflush(stdout);
  }
};

TrainCallbacks make_callbacks(TrainPrinter& printer, int64_t epochs) {
  TrainCallbacks c;
  c.on_sparsify = [&printer](const SparsifyReport& r) { printer.sparsify(r); };
  c.on_step = [&printer](const StepProgress& p) { printer.step(p); };
  c.on_epoch = [&printer, epochs](const EpochMetrics& m) { printer.epoch(m, epochs); };
  return c;
}

int run_train(const TrainCliOptions& o) {
  const TrainOptions options = build_options(o);
  const bool charlm = options.model.kind == ModelKind::kCharLm;
  std::vector<CompareEntry> entries;
  if (!o.compare.empty()) entries = parse_compare_list(o.compare);
  const TrainData data = load_default_train_data(options);
  TrainPrinter printer;
  printer.tty = isatty(STDERR_FILENO) == 1;
  printer.quiet = o.quiet || o.json_path == "-";
  printer.charlm = charlm;
  const TrainCallbacks callbacks = make_callbacks(printer, options.epochs);

  if (entries.empty()) {
    const TrainReport r = train(options, data, callbacks);
    if (!printer.quiet && options.epochs == 0) {
      std::printf("evaluated%s: %s\nreport.json in %s/\n",
                  options.init_path.empty() ? "" : (" " + options.init_path.string()).c_str(),
                  charlm ? ("val loss " + format_fixed(r.final_test_loss, 4)).c_str()
                         : ("test accuracy " + format_fixed(100.0 * r.final_test_accuracy, 2) +
                            "%, test loss " + format_fixed(r.final_test_loss, 4))
                               .c_str(),
                  options.out_dir.string().c_str());
    } else if (!printer.quiet) {
      if (!r.plot_warning.empty())
        std::fprintf(stderr, "nmsparse: warning: %s\n", r.plot_warning.c_str());
      std::printf(
          "\n%s after %lld epochs: %s; mean step %.2f ms; wall %.1f s\n", r.status.c_str(),
          static_cast<long long>(r.history.empty() ? 0 : r.history.back().epoch),
          charlm
              ? ("val loss " + format_fixed(r.final_test_loss, 4)).c_str()
              : ("test accuracy " + format_fixed(100.0 * r.final_test_accuracy, 2) + "%").c_str(),
          r.mean_step_ms, r.seconds);
      std::printf("checkpoint, report.json, recipe.json%s in %s/\n",
                  r.plot_warning.empty() && options.plot ? ", training.png" : "",
                  options.out_dir.string().c_str());
    }
    write_json_report(o.json_path, nlohmann::json::parse(r.to_json()));
    return kExitOk;
  }

  const CompareReport cr = train_compare(options, entries, data, callbacks, [&](size_t i) {
    printer.prefix = "[" + std::to_string(i + 1) + "/" + std::to_string(entries.size()) + " " +
                     entries[i].name + "] ";
  });
  double dense_ms = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].weights == WeightMode::kDense && entries[i].grads == GradMode::kDense) {
      dense_ms = cr.runs[i].mean_step_ms;
    }
  }
  if (!printer.quiet) {
    Table table({"config", "weights", "grads", charlm ? "val loss" : "test acc", "ms/step",
                 "speedup vs dense", "wall s"});
    for (size_t i = 0; i < entries.size(); ++i) {
      const TrainReport& r = cr.runs[i];
      table.add_row({entries[i].name, std::string(weight_mode_name(entries[i].weights)),
                     std::string(grad_mode_name(entries[i].grads)),
                     charlm ? format_fixed(r.final_test_loss, 4)
                            : format_fixed(100.0 * r.final_test_accuracy, 2) + "%",
                     format_fixed(r.mean_step_ms, 2),
                     dense_ms > 0 ? format_fixed(dense_ms / r.mean_step_ms, 2) + "x" : "-",
                     format_fixed(r.seconds, 1)});
    }
    std::printf("\n");
    table.print(stdout);
    if (!cr.plot_warning.empty())
      std::fprintf(stderr, "nmsparse: warning: %s\n", cr.plot_warning.c_str());
    std::printf("\ncompare.json%s and one directory per config in %s/\n",
                cr.plot_warning.empty() && options.plot ? ", compare.png" : "",
                options.out_dir.string().c_str());
  }
  write_json_report(o.json_path, nlohmann::json::parse(cr.to_json()));
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TrainCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Sparse training with SparseLinear layers: mlp or vit on Fashion-MNIST, charlm (byte-level "
      "transformer) on Jane Austen. Weights: dense | nm (SR-STE, mask recomputed each step) | "
      "transposable (N:M along in and out: all three GEMMs sparse) | bimask (forward N:M along in, "
      "a separate backward mask N:M along out). Gradients dY pruned N:M along tokens: dense | mvue "
      "(unbiased) | mvue-approx24 | topn (biased). A checkpoint after every epoch in --out; "
      "--resume continues bit-identically. See docs/training.md.");
  cmd->add_option("--model", o->model, "mlp, vit or charlm")->capture_default_str();
  cmd->add_option("--hidden", o->hidden, "mlp hidden sizes, e.g. 1024,1024 (default)");
  cmd->add_option("--width", o->width, "vit/charlm embedding width (default 192 vit, 128 charlm)");
  cmd->add_option("--heads", o->heads, "vit/charlm attention heads (default 3 vit, 4 charlm)");
  cmd->add_option("--blocks", o->blocks, "vit/charlm transformer blocks (default 4)");
  cmd->add_option("--context", o->context, "charlm context length (default 128)");
  auto* nm = cmd->add_option("--nm", o->nm, "Weight pattern N:M = keep at most N of every M")
                 ->capture_default_str();
  auto* weights = cmd->add_option("--weights", o->weights, "dense, nm, transposable or bimask")
                      ->capture_default_str();
  auto* grads = cmd->add_option("--grads", o->grads, "dense, mvue, mvue-approx24 or topn")
                    ->capture_default_str();
  auto* grad_nm =
      cmd->add_option("--grad-nm", o->grad_nm, "Pattern of dY along tokens")->capture_default_str();
  auto* path = cmd->add_option("--path", o->path, "kernels (nmsparse) or reference (LibTorch)")
                   ->capture_default_str();
  auto* solver =
      cmd->add_option("--solver", o->solver, "Transposable mask solver: exact, greedy or entropic")
          ->capture_default_str();
  auto* inputs =
      cmd->add_option("--inputs", o->inputs,
                      "Inputs of the sparse forward and backward-data GEMMs: fp32, or bf16 (X, dY "
                      "and the masked weights rounded to bf16, fp32 accumulation; the kernel path "
                      "needs AVX512_BF16). Weights, gradients and the weight gradient stay fp32")
          ->capture_default_str();
  auto* decay = cmd->add_option("--decay", o->decay,
                                "SR-STE decay: lambda * (1 - mask) * W is added to the weight "
                                "gradient of every sparse weight mode; 0 disables it")
                    ->capture_default_str();
  cmd->add_option("--recipe", o->recipe,
                  "Recipe JSON (per-layer modes, skips; see recipe.h) instead of the mode flags")
      ->excludes(nm)
      ->excludes(weights)
      ->excludes(grads)
      ->excludes(grad_nm)
      ->excludes(path)
      ->excludes(solver)
      ->excludes(inputs)
      ->excludes(decay);
  cmd->add_option("--compare", o->compare,
                  "Comma-separated weights+grads configs run one after another into OUT/<name>/, "
                  "e.g. dense,bimask+mvue,transposable+mvue,nm+topn (overrides --weights/--grads)");
  cmd->add_option("--epochs", o->epochs,
                  "Epochs (the cosine schedule spans them all); 0 = evaluate only (with --init: "
                  "the given weights), writing report.json and no checkpoint")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch size")->capture_default_str();
  cmd->add_option("--lr", o->lr, "Peak learning rate (0 = 0.05 for sgd, 1e-3 for adamw)")
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "sgd (default for mlp) or adamw (vit, charlm)");
  cmd->add_option("--seed", o->seed,
                  "Seed of init, shuffling, gradient pruning (with --recipe, the "
                  "gradient pruning and Bi-Mask candidates use the recipe's \"seed\", default 0)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "Threads for LibTorch, OpenMP and OpenBLAS (0 = default)")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Output directory (checkpoint, report.json, plots)")->required();
  cmd->add_option("--resume", o->resume, "Continue the run whose checkpoint is in this directory");
  cmd->add_option("--init", o->init,
                  "Start a fresh run (new optimiser, any recipe) from the parameters model.<name> "
                  "of this safetensors file: a training checkpoint or a pruned copy of one");
  cmd->add_option("--limit-train", o->limit_train, "Use only the first N training images");
  cmd->add_option("--limit-test", o->limit_test, "Use only the first N test images / val windows");
  cmd->add_option("--steps-per-epoch", o->steps_per_epoch,
                  "charlm: steps per epoch (default 200); mlp/vit: a cap");
  cmd->add_option("--stop-after", o->stop_after,
                  "Stop after this many epochs, as if interrupted (resume later)");
  cmd->add_flag("--no-plot", o->no_plot, "Do not draw training.png / compare.png");
  cmd->add_flag("--no-normalize", o->no_normalize, "Images as x/255 without mean/std scaling");
  cmd->add_option("--json", o->json_path, "Also write the report JSON here ('-' = stdout)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress and tables");
  cmd->callback([o, &exit_code] { exit_code = run_train(*o); });
}

}  // namespace nms::cli
