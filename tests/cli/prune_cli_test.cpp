// End-to-end tests of `nmsparse prune`: the output equals the library's per-layer result, always
// verifies, carries its recipe, and bad input is refused with a message naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../prune/prune_testing.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/prune/calibration.h"
#include "nmsparse/prune/prune.h"
#include "testing/cli_fixture.h"
#include "testing/random.h"

namespace nms {
namespace {

std::vector<std::byte> f32_bytes(const float* v, size_t n) {
  std::vector<std::byte> b(n * sizeof(float));
  std::memcpy(b.data(), v, b.size());
  return b;
}

class PruneCli : public testing::CliFixture {
 protected:
  // Model: fc1 (weight [16, 32], bias [16]), fc2 (weight [8, 16], no bias), norm [32] (1-D),
  // odd [8, 6] (6 columns: not N:M-able). Calibration for fc1 and fc2, with input sums.
  void SetUp() override {
    CliFixture::SetUp();
    fc1_ = testing::random_matrix(16, 32, 41);
    fc2_ = testing::random_matrix(8, 16, 42);
    bias_.assign(16, 0.0f);
    for (int k = 0; k < 16; ++k) bias_[k] = 0.1f * static_cast<float>(k - 8);
    const Matrix odd = testing::random_matrix(8, 6, 43);
    std::vector<float> norm(32, 1.0f);
    write_safetensors(path("model.safetensors"),
                      {{{"fc1.weight", DType::kF32, {16, 32}}, f32_bytes(fc1_.data(), 512)},
                       {{"fc1.bias", DType::kF32, {16}}, f32_bytes(bias_.data(), 16)},
                       {{"fc2.weight", DType::kF32, {8, 16}}, f32_bytes(fc2_.data(), 128)},
                       {{"norm", DType::kF32, {32}}, f32_bytes(norm.data(), 32)},
                       {{"odd.weight", DType::kF32, {8, 6}}, f32_bytes(odd.data(), 48)}},
                      {{"origin", "test"}});
    cal1_ = testing::statistics_of(testing::correlated_inputs(96, 32, 44), 96, 32, "fc1");
    cal2_ = testing::statistics_of(testing::correlated_inputs(96, 16, 45), 96, 16, "fc2");
    write_calibration(path("calib.safetensors"), {cal1_, cal2_});
  }

  std::vector<float> tensor(const std::string& file, const std::string& name) const {
    const SafetensorsFile f = SafetensorsFile::open(path(file));
    return f.read_f32(f.at(name));
  }

  Matrix fc1_, fc2_;
  std::vector<float> bias_;
  LayerCalibration cal1_, cal2_;
};

TEST_F(PruneCli, EveryMethodMatchesTheLibraryAndVerifies) {
  const std::vector<std::pair<std::string, PruneMethod>> methods = {
      {"magnitude", PruneMethod::kMagnitude},
      {"wanda", PruneMethod::kWanda},
      {"sparsegpt", PruneMethod::kSparseGpt},
      {"adaprune", PruneMethod::kAdaPrune}};
  for (const auto& [name, method] : methods) {
    for (bool transposable : {false, true}) {
      const std::string out = name + (transposable ? "_t" : "") + ".safetensors";
      const testing::CliResult r =
          ok("prune --method " + name + " --nm 2:4 --calib calib.safetensors --iterations 50 " +
             (transposable ? "--transposable " : "") + "--threads 1 model.safetensors " + out +
             " --json " + out + ".json");
      PruneOptions o;
      o.iterations = 50;
      if (transposable) o.structure = PruneStructure::kTransposable;
      Matrix w1 = fc1_, w2 = fc2_;
      std::vector<float> b1 = bias_;
      prune_layer(method, w1.view(), b1, &cal1_, o);
      prune_layer(method, w2.view(), {}, &cal2_, o);
      const std::vector<float> got1 = tensor(out, "fc1.weight");
      const std::vector<float> got2 = tensor(out, "fc2.weight");
      // Same code, same inputs, one thread: bit-identical (the calibration file round-trips
      // the statistics through float32, so compare against the library on the file's values).
      const CalibrationFile file = CalibrationFile::open(path("calib.safetensors"));
      Matrix e1 = fc1_, e2 = fc2_;
      std::vector<float> eb = bias_;
      const LayerCalibration f1 = file.read("fc1"), f2 = file.read("fc2");
      prune_layer(method, e1.view(), eb, &f1, o);
      prune_layer(method, e2.view(), {}, &f2, o);
      EXPECT_EQ(got1, std::vector<float>(e1.data(), e1.data() + 512)) << name;
      EXPECT_EQ(got2, std::vector<float>(e2.data(), e2.data() + 128)) << name;
      const std::vector<float> bias_out = tensor(out, "fc1.bias");
      if (method == PruneMethod::kAdaPrune) {
        EXPECT_EQ(bias_out, eb) << "adaprune tunes the bias";
        EXPECT_NE(bias_out, bias_);
      } else {
        EXPECT_EQ(bias_out, bias_);
      }
      EXPECT_EQ(tensor(out, "odd.weight"), tensor("model.safetensors", "odd.weight"));
      ok(std::string("verify --nm 2:4 ") + (transposable ? "--transposable " : "") +
         "--include 'fc' " + out);
      const auto report = nlohmann::json::parse(testing::slurp(path(out + ".json")));
      EXPECT_EQ(report["pruned"], 2);
      EXPECT_DOUBLE_EQ(report["density"].get<double>(), 0.5);
      EXPECT_TRUE(report["mean_relative_error"].is_number()) << name;
      const auto recipe = nlohmann::json::parse(testing::slurp(
          path(out.substr(0, out.size() - std::string(".safetensors").size()) + ".recipe.json")));
      EXPECT_EQ(recipe["method"], name);
      EXPECT_EQ(recipe["structure"], transposable ? "transposable" : "rowwise");
      EXPECT_EQ(SafetensorsFile::open(path(out)).metadata().at("origin"), "test");
      EXPECT_NE(r.out.find("density 0.5000"), std::string::npos) << r.out;
    }
  }
}

TEST_F(PruneCli, MagnitudeWithoutCalibrationPrunesEveryEligibleTensor) {
  const testing::CliResult r = ok("prune --nm 1:4 model.safetensors m.safetensors --json -");
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["pruned"], 2);  // fc1, fc2; odd (6 columns) and the 1-D tensors skipped
  ok("verify --nm 1:4 --include 'fc' m.safetensors");
  ok("prune --nm 2:4 --unstructured model.safetensors u.safetensors -q");
  const std::vector<float> odd = tensor("u.safetensors", "odd.weight");
  int zeros = 0;
  for (float v : odd) zeros += v == 0.0f;
  EXPECT_EQ(zeros, 24);  // 3 of 6 per row: unstructured needs no divisibility
}

TEST_F(PruneCli, PackedOutputUnpacksToTheDenseResult) {
  ok("prune --method wanda --nm 2:4 --calib calib.safetensors model.safetensors d.safetensors -q");
  ok("prune --method wanda --nm 2:4 --calib calib.safetensors --packed model.safetensors "
     "p.safetensors -q");
  ok("unpack p.safetensors u.safetensors -q");
  EXPECT_EQ(tensor("u.safetensors", "fc1.weight"), tensor("d.safetensors", "fc1.weight"));
  EXPECT_FALSE(std::filesystem::exists(path("p.safetensors.dense.tmp")));
}

TEST_F(PruneCli, BadInputIsNamed) {
  bad("prune --method wanda --nm 2:4 model.safetensors o.safetensors", "needs --calib");
  bad("prune --method obs --nm 2:4 model.safetensors o.safetensors", "unknown --method 'obs'");
  bad("prune --nm 2:4 --transposable --unstructured model.safetensors o.safetensors",
      "exclude each other");
  bad("prune --nm 2:4 --transposable --solver lp model.safetensors o.safetensors",
      "unknown --solver 'lp'");
  bad("prune --method sparsegpt --damp -1 --nm 2:4 --calib calib.safetensors model.safetensors "
      "o.safetensors",
      "damp (-1)");
  bad("prune --method wanda --nm 2:4 --calib model.safetensors model.safetensors o.safetensors",
      "not a calibration file");
  // Statistics of the wrong width for fc2: named with the tensor.
  LayerCalibration wrong =
      testing::statistics_of(testing::correlated_inputs(20, 8, 46), 20, 8, "fc2");
  write_calibration(path("wrong.safetensors"), {cal1_, wrong});
  bad("prune --method wanda --nm 2:4 --calib wrong.safetensors model.safetensors o.safetensors",
      "tensor 'fc2.weight'");
  bad("prune --method wanda --nm 2:4 --calib wrong.safetensors model.safetensors o.safetensors",
      "calibration layer 'fc2' has in = 8");
  EXPECT_FALSE(std::filesystem::exists(path("o.safetensors")));
  // A calibration file for another model: nothing to prune.
  LayerCalibration other = cal1_;
  other.name = "encoder.fc";
  write_calibration(path("other.safetensors"), {other});
  bad("prune --method wanda --nm 2:4 --calib other.safetensors model.safetensors o.safetensors",
      "no tensor of 'model.safetensors' can be pruned");
  bad("prune --nm 2:4 model.safetensors model.safetensors", "input");
  // A layer chosen by --include must have statistics.
  write_calibration(path("fc1only.safetensors"), {cal1_});
  bad("prune --method wanda --nm 2:4 --calib fc1only.safetensors --include 'fc' "
      "model.safetensors o.safetensors",
      "tensor 'fc2.weight' is selected by --include but --calib");
  ok("prune --method wanda --nm 2:4 --calib fc1only.safetensors model.safetensors o.safetensors "
     "-q");
}

}  // namespace
}  // namespace nms
