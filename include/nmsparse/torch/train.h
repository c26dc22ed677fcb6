// The training loop of `nmsparse train`: a model from models.h, sparsified by a recipe, trained on
// Fashion-MNIST (mlp, vit) or the Jane Austen character corpus (charlm) with checkpoints after
// every epoch, bit-identical resume, and a report.
//
// Determinism. Everything random is a pure function of the seed: the model is initialised under
// torch::manual_seed(seed); the epoch-e shuffle of the training images is a Fisher-Yates
// permutation drawn from CounterRng(seed, e); the charlm windows of global step s come from
// CounterRng(seed, s); SparseLinear draws from its own counter-based streams. No generator state
// is carried between steps, so a run resumed from the checkpoint of epoch k continues exactly
// as the uninterrupted run (same parameters bit for bit, same losses), given the same thread
// count.
//
// Optimisers (written here with explicit state tensors, so that checkpoints name every one):
//   sgd    momentum 0.9 (buf = 0.9 buf + g + wd·p; p -= lr·buf), weight decay 5e-4 on matrices;
//          the default for mlp (lr 0.05).
//   adamw  β = (0.9, 0.999), ε = 1e-8, decoupled weight decay 0.05 on matrices, gradient clipping
//          at global norm 1; the default for vit and charlm (lr 1e-3).
// Both follow a cosine schedule over all steps of `epochs` epochs (lr·½(1 + cos(π t / T))), after
// a linear warm-up of `warmup_steps` (default: none for sgd, min(200, T/20) for adamw).
//
// Output directory (all files written atomically):
//   checkpoint.safetensors  "model.<name>" for every parameter and buffer (the SparseLinear masks,
//                           permutation and step counters are buffers), "optim.<name>.<state>"
//                           for the optimiser state, "optim.step"; metadata "nmsparse.train.config"
//                           (the config JSON), "nmsparse.train.epoch" (epochs completed),
//                           "nmsparse.train.history" (per-epoch metrics so far).
//   report.json             config, recipe, sparsify report, history, final metrics, timing.
//   recipe.json             the recipe (loadable with --recipe).
//   history.dat, training.png   per-epoch curves (gnuplot; skipped with a warning without it).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nmsparse/data/fashion_mnist.h"
#include "nmsparse/torch/models.h"
#include "nmsparse/torch/recipe.h"

namespace nms {

enum class OptimizerKind { kSgd, kAdamW };
std::string_view optimizer_name(OptimizerKind kind);                      // "sgd" | "adamw"
std::optional<OptimizerKind> optimizer_from_name(std::string_view name);  // nullopt otherwise

struct TrainOptions {
  ModelConfig model;    // charlm: vocab is set from the corpus
  Recipe recipe;        // dense by default
  int64_t epochs = 10;  // 0 = evaluate only (see train())
  int64_t batch = 128;
  double lr = 0;                           // 0 = the optimiser's default (see the file comment)
  std::optional<OptimizerKind> optimizer;  // nullopt = sgd for mlp, adamw for vit and charlm
  double weight_decay = -1;                // < 0 = the optimiser's default
  int64_t warmup_steps = -1;               // < 0 = the optimiser's default
  uint64_t seed = 0;
  int threads = 0;                   // 0 = leave LibTorch / OpenMP / OpenBLAS as they are
  bool normalize = true;             // images: (x/255 − 0.2860) / 0.3530 instead of x/255
  int64_t limit_train = 0;           // > 0: only the first N training images (mlp, vit)
  int64_t limit_test = 0;            // > 0: only the first N test images / validation windows
  int64_t steps_per_epoch = 0;       // charlm: 0 = 200; mlp/vit: > 0 caps the steps of an epoch
  int64_t stop_after_epochs = 0;     // > 0: stop once this many epochs are done (as if interrupted)
  std::filesystem::path out_dir;     // required
  std::filesystem::path resume_dir;  // empty = fresh run; else continue from its checkpoint
  // Non-empty: a fresh run starts from the parameters (not buffers, not optimiser state) of this
  // safetensors file's "model.<name>" tensors (a training checkpoint or a pruned copy), with a
  // new optimiser. Part of the config ("init"), so a resume must name it too; a resume loads
  // everything from its checkpoint and does not read this file.
  std::filesystem::path init_path;
  bool plot = true;  // training.png with gnuplot when available

  void validate() const;  // throws nms::Error naming the offending field
  // The fields that define the run (everything but threads, directories, plot and
  // stop_after_epochs), resolved defaults included. A resume must match it key for key.
  std::string config_json() const;
};

// The data a run trains on. mlp/vit use train_images/test_images; charlm uses text.
struct TrainData {
  ImageDataset train_images;
  ImageDataset test_images;
  std::string text;
};
// Loads the default data of options.model.kind: Fashion-MNIST from fashion_mnist_default_dir(), or
// the Austen corpus. A missing dataset is an error saying which package provides it.
TrainData load_default_train_data(const TrainOptions& options);

// Fraction of the training time spent in SparseLinear GEMMs and mask work (seconds).
struct ProfileSplit {
  double gemm = 0;  // forward + backward-data + weight-gradient GEMMs
  double mask = 0;  // mask solves, permutation search, operand compression / gradient pruning
  double rest = 0;  // everything else (dense layers, activations, loss, optimiser, data)
};

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  int64_t steps = 0;
  double train_loss = 0;     // mean of the step losses
  double test_loss = 0;      // mlp/vit: test cross-entropy; charlm: validation loss
  double test_accuracy = 0;  // mlp/vit (NaN for charlm)
  double lr = 0;             // at the last step
  double seconds = 0;        // training part of the epoch (no evaluation)
  double eval_seconds = 0;
  double step_ms = 0;  // mean step time
  ProfileSplit profile;
};

struct TrainReport {
  std::string config_json;
  std::string recipe_json;
  SparsifyReport sparsify;
  std::vector<EpochMetrics> history;  // every epoch done so far, resumed ones included
  int64_t resumed_from_epoch = 0;     // 0 = fresh run
  // "finished" | "stopped" (stop_after_epochs) | "diverged" | "evaluated" (epochs 0)
  std::string status;
  double final_test_accuracy = 0;  // of the last epoch (NaN for charlm)
  double final_test_loss = 0;      // test loss, or val_loss for charlm
  double mean_step_ms = 0;         // over the epochs of this report
  double seconds = 0;              // wall time of this invocation
  std::filesystem::path out_dir;
  std::string plot_warning;  // why no plot was drawn (empty when it was, or when not asked)

  std::string to_json() const;  // the report.json contents
};

struct StepProgress {
  int64_t epoch = 0;  // 1-based
  int64_t epochs = 0;
  int64_t step = 0;  // 1-based within the epoch
  int64_t steps = 0;
  double loss = 0;  // running mean of this epoch
  double step_seconds = 0;
};

struct TrainCallbacks {
  std::function<void(const SparsifyReport&)> on_sparsify;
  std::function<void(const StepProgress&)> on_step;
  std::function<void(const EpochMetrics&)> on_epoch;
};

// Trains per `options` on `data`, writing checkpoint, report and plot to options.out_dir (created
// if missing). Throws nms::Error for bad options, a recipe whose sparse pattern fits no layer, a
// resume directory without a checkpoint or with a different config (the message names the field
// and both values), and a non-finite loss (the message names epoch and step; the checkpoint of the
// last good epoch stays, and report.json says "diverged").
//
// epochs == 0 evaluates the model (after --init, when given) without a training step: no
// checkpoint, report.json with status "evaluated", an empty history, epochs_done 0 and the
// metrics (test_accuracy/test_loss, or val_loss for charlm) in final_test_* and at the report's
// top level. It cannot be combined with resume_dir.
TrainReport train(const TrainOptions& options, const TrainData& data,
                  const TrainCallbacks& callbacks = {});

// Sets LibTorch's intra-op threads, OpenMP's and OpenBLAS's (found with dlsym when the process
// has it), so that no pool runs more than `threads`. threads <= 0 does nothing.
void set_training_threads(int threads);

// --- checkpoints -------------------------------------------------------------------------------

struct Checkpoint {
  std::map<std::string, torch::Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;
};
// Atomic (temporary file + rename). float32/64, float16, bfloat16, uint8, int8/16/32/64 and bool
// tensors are stored bit-exactly.
void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint);
Checkpoint read_checkpoint(const std::filesystem::path& path);
// Adds prefix + name for every defined parameter and buffer of `module` (copies).
void module_state_to(const torch::nn::Module& module, Checkpoint& checkpoint,
                     const std::string& prefix = "model.");
// Copies every parameter and buffer of `module` from prefix + name, in place. A missing tensor or
// a different shape or dtype is an error naming it.
void module_state_from(torch::nn::Module& module, const Checkpoint& checkpoint,
                       const std::string& prefix = "model.");
// Copies only the parameters (not the buffers) of `module` from prefix + name, in place; the same
// errors as module_state_from. Tensors of the checkpoint that the module lacks are ignored.
void module_parameters_from(torch::nn::Module& module, const Checkpoint& checkpoint,
                            const std::string& prefix = "model.");

// The model of a training checkpoint (or of a pruned copy of one: the same tensor names and
// metadata, other weights), rebuilt from its "nmsparse.train.config" metadata.
struct TrainedModel {
  TrainOptions options;  // as restored by train_options_from_config (no directories)
  std::shared_ptr<TrainableModel> model;
  SparsifyReport sparsify;  // the run's recipe applied to the rebuilt model
  std::filesystem::path file;
  std::map<std::string, std::string> metadata;
};
// Reads `path` (a checkpoint file, or a training directory holding checkpoint.safetensors),
// builds the model of its config, applies the recipe (sparsify) and copies the parameters from
// "model.<name>". Buffers (masks, counters) are not loaded: masks are recomputed from the loaded
// weights at the first forward pass, so a pruned copy is seen as it is. Throws nms::Error for a
// missing file, a file without "nmsparse.train.config" ("not a training checkpoint"), and a
// missing or mismatched tensor (naming it).
TrainedModel load_trained_model(const std::filesystem::path& path);

// The TrainOptions whose config_json() is `config_json` (inverse of config_json(); out_dir,
// resume_dir, threads, plot and stop_after_epochs keep their defaults). Throws nms::Error naming
// a missing or malformed field.
TrainOptions train_options_from_config(std::string_view config_json);

// --- comparisons -------------------------------------------------------------------------------

struct CompareEntry {
  std::string name;  // as given: "dense", "bimask+mvue", ...
  WeightMode weights = WeightMode::kDense;
  GradMode grads = GradMode::kDense;
};
// "W+G" or "W" (= W+dense); "dense" = dense+dense. Comma-separated list; unknown names and
// duplicates are errors naming the entry.
std::vector<CompareEntry> parse_compare_list(std::string_view list);

struct CompareReport {
  std::vector<CompareEntry> entries;
  std::vector<TrainReport> runs;
  std::string plot_warning;
  std::string to_json() const;  // compare.json: per entry final metric, mean step, speedup
};

// Runs `options` once per entry (recipe weights/grads replaced by the entry's) in
// out_dir/<name>/, then writes out_dir/compare.json and out_dir/compare.png. `on_run` is called
// before each run with its index.
CompareReport train_compare(const TrainOptions& options, const std::vector<CompareEntry>& entries,
                            const TrainData& data, const TrainCallbacks& callbacks = {},
                            const std::function<void(size_t)>& on_run = {});

// Draws the loss and accuracy (or validation loss) curves of one or more runs into `png` with
// gnuplot (the data file and script are written beside it). Returns an empty string on success,
// otherwise why not (gnuplot missing or failing); never throws for a missing gnuplot.
std::string plot_histories(
    const std::vector<std::pair<std::string, std::vector<EpochMetrics>>>& runs, bool charlm,
    const std::filesystem::path& png);

}  // namespace nms
