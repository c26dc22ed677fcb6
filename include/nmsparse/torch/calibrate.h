// Calibration statistics of a trained model: for every SparseLinear layer, the Hessian
// H = Σ x xᵀ, the activation norms ‖X_j‖₂ and the input sums of its inputs x (prune/calibration.h),
// gathered by running the model forward (eval mode, no gradients) over calibration examples of
// the TRAINING data:
//   mlp, vit  the first `samples` training images (in file order, no shuffling), normalised as
//             the run trained (x/255, then (x − 0.2860)/0.3530 when `normalize`);
//   charlm    `samples` context-length windows of the training part of the corpus, drawn as the
//             training loop draws its batches: batch k (of `batch` windows, the last one shorter)
//             takes the windows of training step k under `seed` (charlm_window_starts).
// Every input row of a layer is one calibration sample (a token: an image for mlp, a patch or
// class token for vit, a character position for charlm), so LayerCalibration::samples counts rows.
// Layer L is named "model." + its registered module path ("model.layers.0",
// "model.blocks.1.attn.qkv"), so that the checkpoint's "model.layers.0.weight" maps to it through
// calibration_layer_of().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nmsparse/prune/calibration.h"
#include "nmsparse/torch/models.h"
#include "nmsparse/torch/train.h"

namespace nms {

struct CalibrateOptions {
  ModelKind kind = ModelKind::kMlp;  // what the data is: images (mlp, vit) or text (charlm)
  int64_t samples = 1024;            // images (mlp, vit) or windows (charlm), >= 1
  int64_t batch = 256;               // examples per forward pass, >= 1
  bool include_head = false;         // the head is skipped by default, as sparsify does
  bool with_hessian = true;          // false: act_norm and input_sum only
  bool normalize = true;             // images: as TrainOptions::normalize
  int64_t context = 128;             // charlm window length (ModelConfig::context)
  uint64_t seed = 0;                 // charlm: the window draw
  // Called after every batch with (examples done, examples in all).
  std::function<void(int64_t, int64_t)> on_progress;

  void validate() const;  // throws nms::Error naming the offending field
};

// kind, normalize, context and seed as the run of `train` used them.
CalibrateOptions calibrate_options_for(const TrainOptions& train);

// Gathers the statistics of every SparseLinear of `model` (but its head unless include_head), in
// the order of model.named_modules(). The model is run in eval mode with input observers on its
// layers; its training flag and observers are restored afterwards, also when this throws.
// Throws nms::Error for bad options, more image samples than training images, a model without
// SparseLinear layers to calibrate, and non-finite layer inputs (naming the layer).
std::vector<LayerCalibration> calibrate_model(TrainableModel& model, const TrainData& data,
                                              const CalibrateOptions& options);

}  // namespace nms
