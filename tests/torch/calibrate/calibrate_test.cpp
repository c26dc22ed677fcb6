// Tests of calibrate_model (calibrate.h) and SparseLinear's input observer: the statistics of a
// tiny mlp against XᵀX of its layer inputs computed directly, layer naming, the head, charlm
// windows, and the errors. Synthetic data, so no dataset is needed.
#include "nmsparse/torch/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"

namespace nms {
namespace {

ImageDataset noise_images(int64_t count) {
  ImageDataset d;
  d.count = count;
  d.rows = 28;
  d.cols = 28;
  d.pixels.resize(static_cast<size_t>(count * 28 * 28));
  d.labels.assign(static_cast<size_t>(count), 0);
  const CounterRng rng(3, 1);
  for (size_t i = 0; i < d.pixels.size(); ++i) d.pixels[i] = static_cast<uint8_t>(rng.word(i));
  return d;
}

std::shared_ptr<TrainableModel> tiny_mlp() {
  torch::manual_seed(4);
  ModelConfig c;
  c.mlp_hidden = {16, 8};
  return make_model(c);
}

// Σ x xᵀ, ‖X_j‖, Σ x of a [rows, in] float tensor, in double.
struct Direct {
  torch::Tensor h, norm, sum;
};
Direct direct(const torch::Tensor& x) {
  const torch::Tensor d = x.to(torch::kDouble);
  return {d.t().matmul(d), d.pow(2).sum(0).sqrt(), d.sum(0)};
}

torch::Tensor as_tensor(const std::vector<double>& v, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<double*>(v.data()), shape, torch::kDouble).clone();
}

// max |a − b| / max |b|
double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
}

TEST(Calibrate, MlpStatisticsMatchXtXOfTheLayerInputs) {
  auto model = tiny_mlp();
  TrainData data;
  data.train_images = noise_images(40);
  CalibrateOptions o;
  o.samples = 37;
  o.batch = 16;  // batches 16, 16, 5
  o.include_head = true;
  const std::vector<LayerCalibration> layers = calibrate_model(*model, data, o);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].name, "model.layers.0");
  EXPECT_EQ(layers[1].name, "model.layers.1");
  EXPECT_EQ(layers[2].name, "model.head");
  EXPECT_EQ(calibration_layer_of("model.layers.0.weight"), layers[0].name);

  // The layer inputs, batch by batch as calibrate_model runs them (so that the float32 GEMMs
  // round alike), through the model's own layers.
  torch::NoGradGuard no_grad;
  const torch::Tensor images =
      torch::from_blob(data.train_images.pixels.data(), {37, 784}, torch::kUInt8)
          .to(torch::kFloat)
          .div_(255.0f)
          .sub_(0.2860f)
          .div_(0.3530f);
  std::vector<torch::Tensor> inputs(3);
  for (int64_t i = 0; i < 37; i += 16) {
    torch::Tensor x = images.narrow(0, i, std::min<int64_t>(16, 37 - i));
    int k = 0;
    for (const auto& item : model->named_modules("", false)) {
      auto* layer = item.value()->as<SparseLinearImpl>();
      if (layer == nullptr) continue;
      inputs[k] = inputs[k].defined() ? torch::cat({inputs[k], x}) : x;
      x = layer->forward(x);
      if (item.key() != "head") x = torch::relu(x);
      ++k;
    }
  }
  // Tolerance: both sides sum float32 products in double, in different orders: ~1e-15 relative;
  // the layer inputs themselves are bitwise the same (same layers, same batches).
  for (size_t k = 0; k < 3; ++k) {
    const LayerCalibration& l = layers[k];
    const Direct d = direct(inputs[k]);
    EXPECT_EQ(l.samples, 37);
    EXPECT_EQ(l.in, inputs[k].size(1));
    EXPECT_LT(relative(as_tensor(l.hessian, {l.in, l.in}), d.h), 1e-12) << l.name;
    EXPECT_LT(relative(as_tensor(l.act_norm, {l.in}), d.norm), 1e-12) << l.name;
    EXPECT_LT(relative(as_tensor(l.input_sum, {l.in}), d.sum), 1e-12) << l.name;
    EXPECT_NO_THROW(l.validate()) << l.name;
  }
  // The observers are gone and the training flag is back.
  EXPECT_TRUE(model->is_training());
  for (const auto& item : model->named_modules("", false)) {
    if (auto* layer = item.value()->as<SparseLinearImpl>()) {
      EXPECT_FALSE(layer->has_input_observer());
    }
  }
}

TEST(Calibrate, SkipsTheHeadByDefaultAndCanSkipTheHessian) {
  auto model = tiny_mlp();
  TrainData data;
  data.train_images = noise_images(8);
  CalibrateOptions o;
  o.samples = 8;
  o.with_hessian = false;
  o.normalize = false;
  const auto layers = calibrate_model(*model, data, o);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_FALSE(layers[0].has_hessian());
  // Without normalisation the first layer sees x/255: every norm is at most sqrt(8).
  for (double v : layers[0].act_norm) EXPECT_LE(v, std::sqrt(8.0) + 1e-12);
}

TEST(Calibrate, CharLmCountsEveryCharacterPosition) {
  torch::manual_seed(1);
  ModelConfig c;
  c.kind = ModelKind::kCharLm;
  c.width = 16;
  c.heads = 2;
  c.blocks = 1;
  c.context = 12;
  TrainData data;
  for (int i = 0; i < 400; ++i) data.text += static_cast<char>('a' + (i * 7) % 13);
  c.vocab = 13;
  auto model = make_model(c);
  CalibrateOptions o;
  o.kind = ModelKind::kCharLm;
  o.context = 12;
  o.samples = 5;
  o.batch = 2;
  const auto layers = calibrate_model(*model, data, o);
  ASSERT_FALSE(layers.empty());
  bool saw_qkv = false;
  for (const LayerCalibration& l : layers) {
    EXPECT_EQ(l.samples, 5 * 12) << l.name;
    EXPECT_NE(l.name, "model.head");
    saw_qkv = saw_qkv || l.name == "model.blocks.0.attn.qkv";
  }
  EXPECT_TRUE(saw_qkv);
}

TEST(Calibrate, ObserverSeesTheFlattenedInput) {
  SparseLinear layer(6, 4);
  torch::Tensor seen;
  layer->set_input_observer([&seen](const torch::Tensor& x) { seen = x.clone(); });
  const torch::Tensor x = torch::randn({2, 3, 6}, torch::kDouble).to(torch::kFloat);
  layer->forward(x);
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(seen.sizes(), (std::vector<int64_t>{6, 6}));
  EXPECT_TRUE(seen.is_contiguous());
  EXPECT_TRUE(torch::equal(seen, x.reshape({6, 6})));
  layer->set_input_observer({});
  EXPECT_FALSE(layer->has_input_observer());
}

TEST(Calibrate, ErrorsNameTheValue) {
  auto model = tiny_mlp();
  TrainData data;
  data.train_images = noise_images(8);
  CalibrateOptions o;
  o.samples = 9;
  try {
    calibrate_model(*model, data, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("samples (9) exceeds the 8"), std::string::npos)
        << e.what();
  }
  o.samples = 0;
  EXPECT_THROW(calibrate_model(*model, data, o), Error);
  o.samples = 4;
  o.batch = 0;
  EXPECT_THROW(calibrate_model(*model, data, o), Error);
  EXPECT_TRUE(model->is_training());
}

}  // namespace
}  // namespace nms
