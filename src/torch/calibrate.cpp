// Calibration statistics of a trained model through SparseLinear input observers (calibrate.h).
#include "nmsparse/torch/calibrate.h"

#include <algorithm>
#include <memory>
#include <string>

#include "nmsparse/core/error.h"
#include "nmsparse/torch/sparse_linear.h"
#include "torch/train/train_data.h"

namespace nms {
namespace {

struct Observed {
  SparseLinearImpl* layer = nullptr;
  std::unique_ptr<CalibrationAccumulator> accumulator;
};

// Removes the observers and restores the training flag on every exit path.
class ObserverScope {
 public:
  ObserverScope(TrainableModel& model, std::vector<Observed>& observed)
      : model_(model), observed_(observed), was_training_(model.is_training()) {}
  ~ObserverScope() {
    for (Observed& o : observed_) o.layer->set_input_observer({});
    model_.train(was_training_);
  }
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  TrainableModel& model_;
  std::vector<Observed>& observed_;
  bool was_training_;
};

}  // namespace

void CalibrateOptions::validate() const {
  NMS_CHECK(samples >= 1, "samples (", samples, ") must be >= 1");
  NMS_CHECK(batch >= 1, "batch (", batch, ") must be >= 1");
  NMS_CHECK(kind != ModelKind::kCharLm || context >= 1, "context (", context, ") must be >= 1");
}

CalibrateOptions calibrate_options_for(const TrainOptions& train) {
  CalibrateOptions o;
  o.kind = train.model.kind;
  o.normalize = train.normalize;
  o.context = train.model.context;
  o.seed = train.seed;
  return o;
}

std::vector<LayerCalibration> calibrate_model(TrainableModel& model, const TrainData& data,
                                              const CalibrateOptions& options) {
  options.validate();
  const bool charlm = options.kind == ModelKind::kCharLm;

  // Data first: a bad dataset fails before any work.
  ImageTensors images;
  TextTensors text;
  if (charlm) {
    text = text_tensors(data.text, options.context);
  } else {
    NMS_CHECK(options.samples <= data.train_images.count, "samples (", options.samples,
              ") exceeds the ", data.train_images.count, " training images");
    images = image_tensors(data.train_images, options.samples, options.normalize, "training");
  }

  std::vector<Observed> observed;
  const std::string head = model.head_name();
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* layer = item.value()->as<SparseLinearImpl>();
    if (layer == nullptr || (item.key() == head && !options.include_head)) continue;
    observed.push_back(
        {layer, std::make_unique<CalibrationAccumulator>(
                    "model." + item.key(), layer->options().in_features, options.with_hessian)});
  }
  NMS_CHECK(!observed.empty(), "the model has no SparseLinear layer to calibrate",
            options.include_head ? "" : " (besides its head; include_head calibrates it too)");

  const ObserverScope scope(model, observed);
  for (Observed& o : observed) {
    CalibrationAccumulator* acc = o.accumulator.get();
    o.layer->set_input_observer(
        [acc](const torch::Tensor& x) { acc->add(x.data_ptr<float>(), x.size(0)); });
  }
  model.eval();
  torch::NoGradGuard no_grad;
  for (int64_t done = 0, k = 0; done < options.samples; ++k) {
    const int64_t b = std::min(options.batch, options.samples - done);
    if (charlm) {
      const std::vector<int64_t> starts =
          charlm_window_starts(options.seed, k, b, text.split, options.context);
      model.forward(text_batch(text.ids, starts, options.context).first);
    } else {
      model.forward(images.x.narrow(0, done, b));
    }
    done += b;
    if (options.on_progress) options.on_progress(done, options.samples);
  }

  std::vector<LayerCalibration> layers;
  layers.reserve(observed.size());
  for (const Observed& o : observed) layers.push_back(o.accumulator->finish());
  return layers;
}

}  // namespace nms
