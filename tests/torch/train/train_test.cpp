// Tests of the training loop (train.h): checkpoints, bit-identical resume, config mismatches,
// divergence, the report, comparison lists. All on a small synthetic image set, so no dataset is
// needed; a tiny mlp keeps each test to a few seconds.
#include "nmsparse/torch/train.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "nmsparse/core/error.h"
#include "nmsparse/core/rng.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace nms {
namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Ten classes; class c brightens a 7x7 block at a place of its own, on uniform noise.
ImageDataset synthetic_images(int64_t count, uint64_t seed) {
  ImageDataset d;
  d.count = count;
  d.rows = 28;
  d.cols = 28;
  d.pixels.resize(static_cast<size_t>(count * 28 * 28));
  d.labels.resize(static_cast<size_t>(count));
  const CounterRng rng(seed, 7);
  for (int64_t i = 0; i < count; ++i) {
    const auto label = static_cast<uint8_t>(rng.word(static_cast<uint64_t>(i) << 20) % 10);
    d.labels[static_cast<size_t>(i)] = label;
    const int r0 = 7 * (label % 4);
    const int c0 = 7 * (label / 4);
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        const uint64_t k = (static_cast<uint64_t>(i) << 20) + 1 + static_cast<uint64_t>(r * 28 + c);
        int v = static_cast<int>(rng.word(k) % 96);
        if (r >= r0 && r < r0 + 7 && c >= c0 && c < c0 + 7) v += 150;
        d.pixels[static_cast<size_t>((i * 28 + r) * 28 + c)] = static_cast<uint8_t>(v);
      }
    }
  }
  return d;
}

const TrainData& synthetic_data() {
  static const TrainData data = [] {
    TrainData d;
    d.train_images = synthetic_images(256, 1);
    d.test_images = synthetic_images(128, 2);
    return d;
  }();
  return data;
}

class TrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("nmsparse_train_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions small(const std::string& name) const {
    TrainOptions o;
    o.model.kind = ModelKind::kMlp;
    o.model.mlp_hidden = {32, 32};
    o.epochs = 2;
    o.batch = 32;
    o.seed = 5;
    o.threads = 1;
    o.plot = false;
    o.out_dir = dir_ / name;
    return o;
  }

  fs::path dir_;
};

void expect_same_checkpoints(const fs::path& a, const fs::path& b) {
  const Checkpoint ca = read_checkpoint(a);
  const Checkpoint cb = read_checkpoint(b);
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size());
  for (const auto& [name, t] : ca.tensors) {
    const auto it = cb.tensors.find(name);
    ASSERT_NE(it, cb.tensors.end()) << name;
    ASSERT_EQ(t.scalar_type(), it->second.scalar_type()) << name;
    ASSERT_EQ(t.sizes(), it->second.sizes()) << name;
    EXPECT_EQ(std::memcmp(t.data_ptr(), it->second.data_ptr(), t.nbytes()), 0)
        << name << " differs bitwise";
  }
  EXPECT_EQ(ca.metadata.at("nmsparse.train.epoch"), cb.metadata.at("nmsparse.train.epoch"));
}

TEST_F(TrainTest, CheckpointRoundTripKeepsEveryParameterAndBuffer) {
  ModelConfig config;
  config.mlp_hidden = {32, 32};
  torch::manual_seed(1);
  auto a = make_model(config);
  Recipe recipe;
  recipe.defaults.weights = WeightMode::kBiMask;
  recipe.defaults.grads = GradMode::kMvue;
  sparsify(*a, recipe);
  // One training step so that the masks, permutation and step buffers hold real values.
  torch::Tensor x = torch::rand({16, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {16}, torch::kLong);
  a->loss(a->forward(x), y).backward();

  Checkpoint c;
  module_state_to(*a, c);
  c.tensors["extra.bf16"] = torch::randn({3, 5}).to(torch::kBFloat16);
  c.tensors["extra.bool"] = torch::rand({7}) > 0.5;
  c.tensors["extra.i32"] = torch::randint(-100, 100, {2, 2}, torch::kInt);
  c.tensors["extra.scalar"] = torch::full({}, 42, torch::kLong);
  c.metadata["hello"] = "world";
  const fs::path file = dir_ / "c.safetensors";
  write_checkpoint(file, c);
  const Checkpoint back = read_checkpoint(file);
  EXPECT_EQ(back.metadata.at("hello"), "world");
  ASSERT_EQ(back.tensors.size(), c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    const torch::Tensor& u = back.tensors.at(name);
    EXPECT_EQ(u.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(u.sizes(), t.sizes()) << name;
    EXPECT_EQ(std::memcmp(u.data_ptr(), t.data_ptr(), t.nbytes()), 0) << name;
  }
  bool has_mask = false;
  for (const auto& [name, t] : c.tensors) has_mask |= name.find("mask_fwd") != std::string::npos;
  EXPECT_TRUE(has_mask) << "the SparseLinear buffers are part of the state";

  torch::manual_seed(99);
  auto b = make_model(config);
  sparsify(*b, recipe);
  module_state_from(*b, back);
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  auto ba = a->named_buffers();
  auto bb = b->named_buffers();
  for (const auto& item : ba) EXPECT_TRUE(torch::equal(item.value(), bb[item.key()])) << item.key();

  // A tensor missing from the checkpoint is an error naming it.
  Checkpoint partial = back;
  partial.tensors.erase(partial.tensors.lower_bound("model."));
  try {
    module_state_from(*b, partial);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor"), std::string::npos) << e.what();
  }
}

void check_resume(const TrainOptions& base, const TrainData& data = synthetic_data()) {
  TrainOptions full = base;
  full.out_dir = base.out_dir / "full";
  const TrainReport a = train(full, data);
  ASSERT_EQ(a.history.size(), 2u);
  EXPECT_EQ(a.status, "finished");

  TrainOptions first = base;
  first.out_dir = base.out_dir / "split";
  first.stop_after_epochs = 1;
  const TrainReport b1 = train(first, data);
  ASSERT_EQ(b1.history.size(), 1u);
  EXPECT_EQ(b1.status, "stopped");

  TrainOptions second = base;
  second.out_dir = first.out_dir;
  second.resume_dir = first.out_dir;
  const TrainReport b2 = train(second, data);
  EXPECT_EQ(b2.resumed_from_epoch, 1);
  ASSERT_EQ(b2.history.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(a.history[e].train_loss, b2.history[e].train_loss) << "epoch " << e + 1;
    EXPECT_EQ(a.history[e].test_loss, b2.history[e].test_loss) << "epoch " << e + 1;
    if (!std::isnan(a.history[e].test_accuracy)) {  // charlm has no accuracy (NaN)
      EXPECT_EQ(a.history[e].test_accuracy, b2.history[e].test_accuracy) << "epoch " << e + 1;
    } else {
      EXPECT_TRUE(std::isnan(b2.history[e].test_accuracy));
    }
  }
  expect_same_checkpoints(full.out_dir / "checkpoint.safetensors",
                          first.out_dir / "checkpoint.safetensors");
}

TEST_F(TrainTest, ResumeIsBitIdenticalDenseSgd) {
  check_resume(small("dense"));
}

TEST_F(TrainTest, ResumeIsBitIdenticalSparseAdamW) {
  TrainOptions o = small("sparse");
  o.optimizer = OptimizerKind::kAdamW;
  o.recipe.defaults.weights = WeightMode::kTransposable;
  o.recipe.defaults.grads = GradMode::kMvue;
  o.recipe.defaults.refresh_every = 3;  // a mask solve falls inside each epoch
  check_resume(o);
}

// charlm: the vocabulary comes from the corpus (vocab 0 in the options), windows from the counter
// RNG; a sparse run on a small text resumes bit-identically too.
TEST_F(TrainTest, ResumeIsBitIdenticalCharLm) {
  TrainData text;
  for (int i = 0; i < 200; ++i) text.text += "It is a truth universally acknowledged. ";
  TrainOptions o = small("charlm");
  o.model.kind = ModelKind::kCharLm;
  o.model.width = 32;
  o.model.heads = 2;
  o.model.blocks = 1;
  o.model.context = 16;
  o.model.vocab = 0;
  o.optimizer = OptimizerKind::kAdamW;
  o.batch = 4;
  o.steps_per_epoch = 3;
  o.limit_test = 8;
  o.recipe.defaults.weights = WeightMode::kTransposable;
  o.recipe.defaults.grads = GradMode::kMvue;
  check_resume(o, text);
}

TEST_F(TrainTest, ResumeIsBitIdenticalBiMask) {
  TrainOptions o = small("bimask");
  o.recipe.defaults.weights = WeightMode::kBiMask;
  o.recipe.defaults.grads = GradMode::kTopN;
  o.recipe.defaults.bimask_every = 5;
  o.recipe.defaults.bimask_candidates = 4;
  check_resume(o);
}

TEST_F(TrainTest, MismatchedResumeNamesTheField) {
  TrainOptions o = small("run");
  o.stop_after_epochs = 1;
  train(o, synthetic_data());
  auto expect_refusal = [&](TrainOptions r, const std::string& field) {
    r.stop_after_epochs = 0;
    r.resume_dir = o.out_dir;
    r.out_dir = dir_ / "resumed";
    try {
      train(r, synthetic_data());
      ADD_FAILURE() << "resume with a different " << field << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("different config"), std::string::npos) << e.what();
    }
  };
  TrainOptions r = o;
  r.batch = 16;
  expect_refusal(r, "batch");
  r = o;
  r.seed = 6;
  expect_refusal(r, "seed");
  r = o;
  r.recipe.defaults.weights = WeightMode::kNm;
  expect_refusal(r, "recipe.weights");
  r = o;
  r.model.mlp_hidden = {64, 32};
  expect_refusal(r, "model.hidden");
  r = o;
  r.resume_dir = dir_ / "nowhere";
  r.stop_after_epochs = 0;
  EXPECT_THROW(train(r, synthetic_data()), Error);
}

TEST_F(TrainTest, DivergenceStopsNamingEpochAndStep) {
  TrainOptions o = small("nan");
  o.lr = 1e30;
  try {
    train(o, synthetic_data());
    FAIL() << "lr 1e30 did not diverge";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("at epoch 1 step"), std::string::npos) << what;
    EXPECT_NE(what.find("no checkpoint"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(o.out_dir / "checkpoint.safetensors"));
  EXPECT_EQ(json::parse(slurp(o.out_dir / "report.json")).at("status"), "diverged");
}

TEST_F(TrainTest, DivergenceKeepsTheLastGoodCheckpoint) {
  TrainOptions o = small("poisoned");
  o.stop_after_epochs = 1;
  train(o, synthetic_data());
  // Poison the weights of the epoch-1 checkpoint, so the resumed epoch 2 diverges at once.
  const fs::path file = o.out_dir / "checkpoint.safetensors";
  Checkpoint c = read_checkpoint(file);
  for (auto& [name, t] : c.tensors) {
    if (name.starts_with("model.") && t.is_floating_point() && t.dim() == 2) {
      t.fill_(std::numeric_limits<float>::quiet_NaN());
    }
  }
  write_checkpoint(file, c);
  const std::string before = slurp(file);
  TrainOptions r = o;
  r.stop_after_epochs = 0;
  r.resume_dir = o.out_dir;
  try {
    train(r, synthetic_data());
    FAIL() << "NaN weights did not stop the run";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("at epoch 2 step 1"), std::string::npos) << what;
    EXPECT_NE(what.find("last good epoch (1)"), std::string::npos) << what;
  }
  EXPECT_EQ(slurp(file), before) << "the last good checkpoint was replaced";
  const json report = json::parse(slurp(o.out_dir / "report.json"));
  EXPECT_EQ(report.at("status"), "diverged");
  EXPECT_EQ(report.at("epochs_done"), 1);
}

TEST_F(TrainTest, ReportHasTheDocumentedFields) {
  TrainOptions o = small("report");
  o.recipe.defaults.weights = WeightMode::kNm;
  o.recipe.defaults.grads = GradMode::kMvue;
  o.plot = true;
  const TrainReport r = train(o, synthetic_data());
  const json j = json::parse(slurp(o.out_dir / "report.json"));
  for (const char* key :
       {"command", "status", "config", "recipe", "sparsify", "history", "epochs_done",
        "resumed_from_epoch", "test_accuracy", "test_loss", "mean_step_ms", "seconds", "out_dir"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.at("status"), "finished");
  EXPECT_EQ(j.at("epochs_done"), 2);
  EXPECT_EQ(j.at("config").at("optimizer"), "sgd");
  EXPECT_EQ(j.at("config").at("recipe").at("weights"), "nm");
  ASSERT_EQ(j.at("history").size(), 2u);
  for (const char* key : {"epoch", "steps", "train_loss", "test_loss", "test_accuracy", "lr",
                          "seconds", "eval_seconds", "step_ms", "profile_seconds"}) {
    EXPECT_TRUE(j.at("history")[0].contains(key)) << key;
  }
  EXPECT_EQ(j.at("history")[0].at("steps"), 8);  // 256 images / batch 32
  EXPECT_FALSE(j.at("sparsify").at("sparsified").empty());
  bool head_skipped = false;
  for (const json& s : j.at("sparsify").at("skipped")) head_skipped |= s.at("name") == "head";
  EXPECT_TRUE(head_skipped);
  EXPECT_DOUBLE_EQ(j.at("test_accuracy").get<double>(), r.final_test_accuracy);
  EXPECT_GT(r.final_test_accuracy, 0.3) << "the synthetic classes are easy";
  EXPECT_NO_THROW(parse_recipe(slurp(o.out_dir / "recipe.json")));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(o.out_dir / "training.png")) << r.plot_warning;
  } else {
    EXPECT_FALSE(r.plot_warning.empty());
  }
}

TEST_F(TrainTest, PatternFittingNoLayerIsAnError) {
  TrainOptions o = small("nofit");
  o.recipe.defaults.weights = WeightMode::kNm;
  o.recipe.defaults.pattern = NmPattern::make(2, 5);  // 784, 32 and 10 are not multiples of 5
  try {
    train(o, synthetic_data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fits no layer"), std::string::npos) << e.what();
  }
}

TEST_F(TrainTest, OptionsAreValidated) {
  TrainOptions o = small("bad");
  o.epochs = -1;
  EXPECT_THROW(train(o, synthetic_data()), Error);
  o = small("bad");
  o.out_dir.clear();
  EXPECT_THROW(o.validate(), Error);
}

TEST_F(TrainTest, CompareRunsEveryEntry) {
  TrainOptions o = small("compare");
  o.epochs = 1;
  o.plot = true;
  const auto entries = parse_compare_list("dense,nm+mvue");
  const CompareReport r = train_compare(o, entries, synthetic_data());
  ASSERT_EQ(r.runs.size(), 2u);
  EXPECT_TRUE(fs::exists(o.out_dir / "dense" / "report.json"));
  EXPECT_TRUE(fs::exists(o.out_dir / "nm+mvue" / "checkpoint.safetensors"));
  const json j = json::parse(slurp(o.out_dir / "compare.json"));
  ASSERT_EQ(j.at("runs").size(), 2u);
  EXPECT_DOUBLE_EQ(j.at("runs")[0].at("speedup_vs_dense").get<double>(), 1.0);
  EXPECT_TRUE(j.at("runs")[1].contains("test_accuracy"));
  if (r.plot_warning.empty()) {
    EXPECT_TRUE(fs::exists(o.out_dir / "compare.png"));
  }
}

TEST(CompareList, Parses) {
  const auto e = parse_compare_list("dense,bimask+mvue,transposable+topn,nm");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].weights, WeightMode::kDense);
  EXPECT_EQ(e[0].grads, GradMode::kDense);
  EXPECT_EQ(e[1].weights, WeightMode::kBiMask);
  EXPECT_EQ(e[1].grads, GradMode::kMvue);
  EXPECT_EQ(e[2].grads, GradMode::kTopN);
  EXPECT_EQ(e[3].weights, WeightMode::kNm);
  EXPECT_EQ(e[3].grads, GradMode::kDense);
  EXPECT_THROW(parse_compare_list("dense,sparse"), Error);
  EXPECT_THROW(parse_compare_list("nm+fast"), Error);
  EXPECT_THROW(parse_compare_list("dense,,nm"), Error);
  EXPECT_THROW(parse_compare_list("nm,nm"), Error);
}

TEST(Optimizers, Names) {
  EXPECT_EQ(optimizer_from_name("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(optimizer_from_name("adamw"), OptimizerKind::kAdamW);
  EXPECT_FALSE(optimizer_from_name("adam").has_value());
}

// --- init and evaluate-only ---------------------------------------------------------------------

void expect_parameters_equal(const TrainableModel& model, const Checkpoint& c) {
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& src = c.tensors.at("model." + item.key());
    ASSERT_EQ(src.sizes(), item.value().sizes()) << item.key();
    EXPECT_EQ(std::memcmp(src.data_ptr(), item.value().data_ptr(), src.nbytes()), 0)
        << item.key() << " differs bitwise";
  }
}

TEST_F(TrainTest, InitLoadsTheExactWeightsAndZeroEpochsReproducesTheTestMetrics) {
  TrainOptions a = small("a");
  a.epochs = 1;
  const TrainReport ra = train(a, synthetic_data());
  const fs::path file = a.out_dir / "checkpoint.safetensors";
  const TrainedModel loaded = load_trained_model(a.out_dir);
  expect_parameters_equal(*loaded.model, read_checkpoint(file));

  TrainOptions e = small("eval");
  e.epochs = 0;
  e.seed = 99;  // another initialisation, overwritten by --init
  e.init_path = file;
  const TrainReport re = train(e, synthetic_data());
  EXPECT_EQ(re.status, "evaluated");
  EXPECT_TRUE(re.history.empty());
  EXPECT_EQ(re.final_test_accuracy, ra.history.back().test_accuracy);
  EXPECT_EQ(re.final_test_loss, ra.history.back().test_loss);
  EXPECT_FALSE(fs::exists(e.out_dir / "checkpoint.safetensors"));
  const json j = json::parse(slurp(e.out_dir / "report.json"));
  EXPECT_EQ(j.at("status"), "evaluated");
  EXPECT_EQ(j.at("epochs_done"), 0);
  EXPECT_EQ(j.at("config").at("init"), file.string());
  EXPECT_EQ(j.at("test_accuracy").get<double>(), ra.history.back().test_accuracy);

  // A fresh run from the weights: a new optimiser (its step counts this run only), any recipe.
  TrainOptions f = small("fine");
  f.epochs = 1;
  f.init_path = file;
  f.recipe.defaults.weights = WeightMode::kNm;
  train(f, synthetic_data());
  const Checkpoint cf = read_checkpoint(f.out_dir / "checkpoint.safetensors");
  EXPECT_EQ(cf.tensors.at("optim.step").item<int64_t>(), 256 / 32);
  EXPECT_NE(cf.metadata.at("nmsparse.train.config").find("\"init\""), std::string::npos);
}

TEST_F(TrainTest, InitErrorsNameTheTensor) {
  TrainOptions a = small("a");
  a.epochs = 1;
  train(a, synthetic_data());
  Checkpoint c = read_checkpoint(a.out_dir / "checkpoint.safetensors");
  c.tensors.erase("model.layers.1.weight");
  write_checkpoint(dir_ / "missing.safetensors", c);

  TrainOptions o = small("o");
  o.epochs = 0;
  o.init_path = dir_ / "missing.safetensors";
  try {
    train(o, synthetic_data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.weight"), std::string::npos) << e.what();
  }
  o.init_path = a.out_dir / "checkpoint.safetensors";
  o.model.mlp_hidden = {32, 16};
  try {
    train(o, synthetic_data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.layers.1.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("[16, 32]"), std::string::npos) << what;
  }
  o.init_path = dir_ / "nowhere.safetensors";
  EXPECT_THROW(train(o, synthetic_data()), Error);
  o = small("o");
  o.epochs = 0;
  o.resume_dir = a.out_dir;
  EXPECT_THROW(o.validate(), Error);
}

TEST_F(TrainTest, ConfigRoundTripsThroughTrainOptionsFromConfig) {
  TrainOptions mlp = small("m");
  mlp.init_path = "x.safetensors";
  mlp.recipe.defaults.weights = WeightMode::kBiMask;
  TrainOptions vit = small("v");
  vit.model.kind = ModelKind::kVit;
  vit.model.vit_patch = 7;
  TrainOptions lm = small("c");
  lm.model.kind = ModelKind::kCharLm;
  lm.model.vocab = 77;
  lm.optimizer = OptimizerKind::kSgd;
  for (const TrainOptions& o : {mlp, vit, lm}) {
    EXPECT_EQ(train_options_from_config(o.config_json()).config_json(), o.config_json());
  }
  EXPECT_THROW(train_options_from_config("{\"model\": {\"kind\": \"cnn\"}}"), Error);
  EXPECT_THROW(train_options_from_config("not json"), Error);
}

TEST_F(TrainTest, LoadTrainedModelRefusesOtherFiles) {
  Checkpoint c;
  c.tensors["w"] = torch::zeros({2, 2});
  write_checkpoint(dir_ / "plain.safetensors", c);
  try {
    load_trained_model(dir_ / "plain.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a training checkpoint"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_trained_model(dir_ / "absent.safetensors"), Error);
}

}  // namespace
}  // namespace nms
