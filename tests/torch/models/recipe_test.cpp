// Recipes: parsing, printing, errors, and sparsify on every model.
#include "nmsparse/torch/recipe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nmsparse/grad/prune.h"
#include "nmsparse/torch/models.h"
#include "testing/expect_error.h"

namespace nms {
namespace {

using nms::testing::expect_error;

std::vector<std::string> names_of(const std::vector<std::pair<std::string, std::string>>& list) {
  std::vector<std::string> names;
  for (const auto& [name, note] : list) names.push_back(name);
  return names;
}

SparseLinearImpl* layer_of(torch::nn::Module& model, const std::string& name) {
  return model.named_modules("", false)[name]->as<SparseLinearImpl>();
}

TEST(Recipe, EmptyIsDefaults) {
  const Recipe r = parse_recipe("{}");
  EXPECT_EQ(r.defaults.weights, WeightMode::kDense);
  EXPECT_EQ(r.defaults.grads, GradMode::kDense);
  EXPECT_EQ(r.defaults.path, ExecPath::kKernels);
  EXPECT_FALSE(r.include_head);
  EXPECT_TRUE(r.skip.empty());
  EXPECT_TRUE(r.layer_overrides_json.empty());
  EXPECT_EQ(r, Recipe{});
}

TEST(Recipe, ParsesTheDocumentedExample) {
  const Recipe r = parse_recipe(R"({"weights": "bimask", "grads": "mvue", "nm": "2:4",
      "grad_nm": "2:4", "path": "kernels", "decay": 2e-4, "solver": "exact", "refresh_every": 40,
      "bimask_every": 100, "bimask_candidates": 100, "seed": 0, "include_head": false,
      "skip": ["layers.0"], "layers": {"blocks.0.mlp.fc1": {"nm": "4:8"}}})");
  EXPECT_EQ(r.defaults.weights, WeightMode::kBiMask);
  EXPECT_EQ(r.defaults.grads, GradMode::kMvue);
  EXPECT_EQ(r.defaults.pattern, NmPattern::make(2, 4));
  EXPECT_EQ(r.defaults.decay, 2e-4f);
  EXPECT_EQ(r.skip, std::vector<std::string>{"layers.0"});
  ASSERT_EQ(r.layer_overrides_json.count("blocks.0.mlp.fc1"), 1u);
}

TEST(Recipe, RoundTrips) {
  Recipe r;
  r.defaults.weights = WeightMode::kTransposable;
  r.defaults.grads = GradMode::kMvueApprox24;
  r.defaults.pattern = NmPattern::make(4, 8);
  r.defaults.path = ExecPath::kReference;
  r.defaults.decay = 3e-5f;
  r.defaults.solver = TransposableSolver::kEntropic;
  r.defaults.refresh_every = 7;
  r.defaults.bimask_every = 9;
  r.defaults.bimask_candidates = 11;
  r.defaults.seed = 0xfedcba9876543210ull;
  r.defaults.inputs = GemmInputs::kBf16;
  r.include_head = true;
  r.skip = {"layers.1", "head"};
  r.layer_overrides_json["layers.0"] = R"({ "nm": "1:4",  "weights": "nm" })";
  const std::string text = recipe_to_json(r);
  const Recipe back = parse_recipe(text);
  EXPECT_EQ(back, r) << text;
  EXPECT_EQ(back.defaults.seed, 0xfedcba9876543210ull);
  EXPECT_EQ(recipe_to_json(back), text);
  EXPECT_NE(text.find("\"decay\": 3e-05"), std::string::npos) << text;
  // And the default recipe.
  EXPECT_EQ(parse_recipe(recipe_to_json(Recipe{})), Recipe{});
}

TEST(Recipe, LoadsFromFileAndNamesIt) {
  const auto path = std::filesystem::temp_directory_path() / "nms_recipe_test.json";
  { std::ofstream(path) << R"({"weights": "nm", "nm": "1:4"})"; }
  EXPECT_EQ(load_recipe(path).defaults.pattern, NmPattern::make(1, 4));
  { std::ofstream(path) << R"({"weights": "nmm"})"; }
  expect_error([&] { load_recipe(path); }, path.string() + ": \"weights\"");
  std::filesystem::remove(path);
  expect_error([&] { load_recipe(path); }, "cannot open recipe file");
}

TEST(Recipe, ErrorsNameKeyAndValue) {
  expect_error([] { parse_recipe(R"({"weight": "nm"})"); }, "unknown key \"weight\"");
  expect_error([] { parse_recipe(R"({"nm": "3:2"})"); }, "\"nm\": bad pattern \"3:2\"");
  expect_error([] { parse_recipe(R"({"grad_nm": "two:four"})"); },
               "\"grad_nm\": bad pattern \"two:four\"");
  expect_error([] { parse_recipe(R"({"weights": "sparse"})"); },
               "\"weights\": unknown value \"sparse\" (valid: dense|nm|transposable|bimask)");
  expect_error([] { parse_recipe(R"({"grads": "mvu"})"); }, "\"grads\": unknown value \"mvu\"");
  expect_error([] { parse_recipe(R"({"path": "gpu"})"); }, "\"path\": unknown value \"gpu\"");
  expect_error([] { parse_recipe(R"({"inputs": "fp16"})"); },
               "\"inputs\": unknown value \"fp16\" (valid: fp32|bf16)");
  expect_error([] { parse_recipe(R"({"solver": 3})"); }, "\"solver\": 3 is not a string");
  expect_error([] { parse_recipe(R"({"refresh_every": 1.5})"); },
               "\"refresh_every\": 1.5 is not an integer");
  expect_error([] { parse_recipe(R"({"refresh_every": 0})"); }, "refresh_every (0)");
  expect_error([] { parse_recipe(R"({"bimask_every": 99999999999})"); }, "out of range");
  expect_error([] { parse_recipe(R"({"seed": -1})"); }, "\"seed\": -1 is not an integer >= 0");
  expect_error([] { parse_recipe(R"({"decay": "big"})"); }, "\"decay\": \"big\" is not a number");
  expect_error([] { parse_recipe(R"({"decay": -1})"); }, "decay (-1)");
  expect_error([] { parse_recipe(R"({"include_head": 1})"); }, "\"include_head\": 1");
  expect_error([] { parse_recipe(R"({"skip": "head"})"); }, "\"skip\": \"head\" is not an array");
  expect_error([] { parse_recipe(R"({"skip": ["a", "a"]})"); }, "\"a\" is listed twice");
  expect_error([] { parse_recipe(R"({"grads": "mvue-approx24", "grad_nm": "4:8"})"); },
               "mvue-approx24 needs the gradient pattern 2:4");
  expect_error([] { parse_recipe(R"({"layers": {"head": {"include_head": true}}})"); },
               "\"layers\".\"head\": unknown key \"include_head\"");
  expect_error([] { parse_recipe(R"({"layers": {"head": {"nm": "5:4"}}})"); },
               "\"layers\".\"head\": \"nm\": bad pattern \"5:4\"");
  expect_error([] { parse_recipe(R"({"layers": {"head": "nm"}})"); }, "is not an object");
  expect_error([] { parse_recipe("{\"weights\": "); }, "invalid JSON");
  expect_error([] { parse_recipe("[]", "r.json"); }, "r.json: the recipe must be a JSON object");
}

TEST(Sparsify, DefaultMlp) {
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});
  const Recipe r = parse_recipe(R"({"weights": "nm", "nm": "2:4", "grads": "mvue"})");
  const auto report = sparsify(*model, r, model->head_name());
  EXPECT_EQ(names_of(report.sparsified), (std::vector<std::string>{"layers.0", "layers.1"}));
  EXPECT_EQ(report.sparsified[0].second, "nm 2:4 / mvue 2:4 / kernels");
  EXPECT_EQ(names_of(report.skipped), std::vector<std::string>{"head"});
  EXPECT_NE(report.skipped[0].second.find("include_head"), std::string::npos);
  EXPECT_EQ(layer_of(*model, "layers.1")->config().weights, WeightMode::kNm);
  EXPECT_EQ(layer_of(*model, "head")->config().weights, WeightMode::kDense);
  // Every layer, skipped or not, has its own stream.
  for (const std::string name : {"layers.0", "layers.1", "head"}) {
    EXPECT_EQ(layer_of(*model, name)->stream(), tensor_stream_id(name)) << name;
  }
}

TEST(Sparsify, MlpHeadAndUndividedShapes) {
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});
  // nm needs only `in` divisible: the head 1024 -> 10 takes it.
  auto report = sparsify(*model, parse_recipe(R"({"weights": "nm", "include_head": true})"));
  EXPECT_EQ(names_of(report.sparsified),
            (std::vector<std::string>{"layers.0", "layers.1", "head"}));
  EXPECT_TRUE(report.skipped.empty());
  // Transposable needs out % m == 0 too: head (out 10) is skipped with the reason; 784 % 32 != 0.
  report = sparsify(*model, parse_recipe(R"({"weights": "transposable", "include_head": true,
                                             "layers": {"layers.0": {"nm": "16:32"}}})"));
  EXPECT_EQ(names_of(report.sparsified), std::vector<std::string>{"layers.1"});
  ASSERT_EQ(names_of(report.skipped), (std::vector<std::string>{"layers.0", "head"}));
  EXPECT_NE(report.skipped[0].second.find("in (784) is not a multiple of m (32)"),
            std::string::npos)
      << report.skipped[0].second;
  EXPECT_NE(report.skipped[1].second.find("out (10) is not a multiple of m (4)"), std::string::npos)
      << report.skipped[1].second;
}

TEST(Sparsify, SkipAndOverrides) {
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});
  const auto report = sparsify(*model, parse_recipe(R"({"weights": "bimask", "skip": ["layers.0"],
      "layers": {"layers.1": {"nm": "4:8", "grads": "topn"}}})"));
  EXPECT_EQ(names_of(report.sparsified), std::vector<std::string>{"layers.1"});
  EXPECT_EQ(names_of(report.skipped), (std::vector<std::string>{"layers.0", "head"}));
  EXPECT_EQ(report.skipped[0].second, "listed in \"skip\"");
  const auto& c = layer_of(*model, "layers.1")->config();
  EXPECT_EQ(c.weights, WeightMode::kBiMask);  // from the defaults
  EXPECT_EQ(c.pattern, NmPattern::make(4, 8));
  EXPECT_EQ(c.grads, GradMode::kTopN);
}

TEST(Sparsify, DenseRecipeSparsifiesNothing) {
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});
  const auto report = sparsify(*model, Recipe{});
  EXPECT_TRUE(report.sparsified.empty());
  EXPECT_EQ(report.skipped.size(), 3u);
}

TEST(Sparsify, Vit) {
  torch::manual_seed(0);
  ModelConfig config;
  config.kind = ModelKind::kVit;
  config.blocks = 1;
  config.vit_patch = 7;  // patch_embed in = 49: not a multiple of 4
  auto model = make_model(config);
  const auto report = sparsify(*model, parse_recipe(R"({"weights": "transposable"})"));
  EXPECT_EQ(names_of(report.sparsified),
            (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1",
                                      "blocks.0.mlp.fc2"}));
  EXPECT_EQ(names_of(report.skipped), (std::vector<std::string>{"patch_embed", "head"}));
  EXPECT_NE(report.skipped[0].second.find("in (49)"), std::string::npos);
  // Patch 4: patch_embed is 16 -> 192 and takes 2:4.
  config.vit_patch = 4;
  model = make_model(config);
  EXPECT_EQ(sparsify(*model, parse_recipe(R"({"weights": "nm"})")).sparsified.size(), 5u);
}

TEST(Sparsify, CharLm) {
  torch::manual_seed(0);
  ModelConfig config;
  config.kind = ModelKind::kCharLm;
  config.width = 32;
  config.heads = 4;
  config.blocks = 2;
  config.context = 8;
  config.vocab = 96;
  auto model = make_model(config);
  auto report = sparsify(*model, parse_recipe(R"({"weights": "bimask"})"));
  EXPECT_EQ(report.sparsified.size(), 8u);
  EXPECT_EQ(names_of(report.skipped), std::vector<std::string>{"head"});
  report = sparsify(*model, parse_recipe(R"({"weights": "bimask", "include_head": true})"));
  EXPECT_EQ(report.sparsified.size(), 9u);  // head 32 -> 96: both divisible by 4
  EXPECT_TRUE(report.skipped.empty());
}

TEST(Sparsify, UnknownLayerNamesAreErrorsAndChangeNothing) {
  torch::manual_seed(0);
  auto model = make_model(ModelConfig{});
  expect_error([&] { sparsify(*model, parse_recipe(R"({"weights": "nm", "skip": ["layer.0"]})")); },
               "\"skip\": \"layer.0\" is not a SparseLinear layer of the model (layers: layers.0, "
               "layers.1, head)");
  expect_error(
      [&] {
        sparsify(*model, parse_recipe(R"({"weights": "nm", "layers": {"fc9": {"nm": "1:4"}}})"));
      },
      "\"layers\": \"fc9\" is not a SparseLinear layer");
  EXPECT_EQ(layer_of(*model, "layers.0")->config().weights, WeightMode::kDense);
  EXPECT_EQ(layer_of(*model, "layers.0")->stream(), 0u);
}

// End to end: every model, sparsified with every weight mode, takes a training step on both
// paths with finite loss and gradients.
TEST(Sparsify, SparsifiedModelsTrain) {
  ModelConfig vit;
  vit.kind = ModelKind::kVit;
  vit.width = 32;
  vit.heads = 2;
  vit.blocks = 1;
  vit.mlp_ratio = 2;
  ModelConfig lm = vit;
  lm.kind = ModelKind::kCharLm;
  lm.context = 8;
  lm.vocab = 16;
  ModelConfig mlp;
  mlp.mlp_hidden = {32};
  for (const auto& config : {mlp, vit, lm}) {
    for (const std::string weights : {"nm", "transposable", "bimask"}) {
      for (const std::string path : {"reference", "kernels"}) {
        SCOPED_TRACE(std::string(model_kind_name(config.kind)) + " " + weights + " " + path);
        torch::manual_seed(0);
        auto model = make_model(config);
        const auto report = sparsify(
            *model, parse_recipe(R"({"weights": ")" + weights + R"(", "grads": "mvue", "path": ")" +
                                 path + R"(", "include_head": true})"));
        EXPECT_FALSE(report.sparsified.empty());
        const bool lm_kind = config.kind == ModelKind::kCharLm;
        auto x = lm_kind ? torch::randint(0, lm.vocab, {4, lm.context}, torch::kInt64)
                         : torch::rand({8, 1, 28, 28});
        auto y = lm_kind ? torch::randint(0, lm.vocab, {4, lm.context}, torch::kInt64)
                         : torch::randint(0, 10, {8}, torch::kInt64);
        auto loss = model->loss(model->forward(x), y);
        loss.backward();
        EXPECT_TRUE(std::isfinite(loss.item<double>()));
        for (const auto& p : model->named_parameters()) {
          ASSERT_TRUE(p.value().grad().defined()) << p.key();
          EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
        }
      }
    }
  }
}

}  // namespace
}  // namespace nms
