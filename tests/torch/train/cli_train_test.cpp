// End-to-end tests of `nmsparse train` (runs the real binary): usage errors, a missing dataset,
// and, when Fashion-MNIST is installed, a short run with its outputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "testing/cli_fixture.h"

namespace fs = std::filesystem;

namespace {

using nms::testing::CliResult;
using nms::testing::slurp;

using TrainCli = nms::testing::CliFixture;

TEST_F(TrainCli, UsageErrorsNameTheValue) {
  bad("train --out o --weights sparse", "unknown --weights 'sparse'");
  bad("train --out o --grads mvu", "unknown --grads 'mvu'");
  bad("train --out o --model resnet", "unknown --model 'resnet'");
  bad("train --out o --path fast", "unknown --path 'fast'");
  bad("train --out o --solver lp", "unknown --solver 'lp'");
  bad("train --out o --nm 5:4", "--nm '5:4'");
  bad("train --out o --epochs -1", "epochs (-1)");
  bad("train --out o --epochs 0 --resume r", "epochs 0 evaluates");
  bad("train --out o --compare dense,foo+mvue", "unknown weight mode 'foo'");
  bad("train --out o --recipe r.json --weights nm", "excludes");
  bad("train --out o --recipe r.json --decay 0", "excludes");
  bad("train --out o --decay -1", "decay (-1)");
  bad("train --out o --recipe missing.json", "missing.json");
  bad("train --out o --optimizer adam", "unknown --optimizer 'adam'");
  const CliResult r = run("train");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}

TEST_F(TrainCli, MissingDatasetSaysWhichPackage) {
  const CliResult r = run("train --out o --epochs 1", "NMSPARSE_FASHION_MNIST=/nonexistent/fmnist");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("dataset-fashion-mnist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/fmnist"), std::string::npos) << r.err;
}

TEST_F(TrainCli, ShortRunOnFashionMnist) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const CliResult r = run(
      "train --model mlp --hidden 64,64 --weights transposable --grads mvue --nm 2:4 --epochs 1 "
      "--batch 64 --limit-train 1024 --limit-test 512 --threads 1 --seed 3 --decay 1e-3 --out run "
      "--json r.json --no-plot");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(skipped:"), std::string::npos) << r.out;  // the head
  const auto j = nlohmann::json::parse(slurp(dir_ / "r.json"));
  EXPECT_EQ(j.at("status"), "finished");
  EXPECT_GT(j.at("test_accuracy").get<double>(), 0.3);
  EXPECT_FLOAT_EQ(j.at("config").at("recipe").at("decay").get<float>(), 1e-3f);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoint.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "report.json"));
  // Resuming with another pattern names the field.
  const CliResult bad = run(
      "train --model mlp --hidden 64,64 --weights transposable --grads mvue --nm 4:8 --epochs 1 "
      "--batch 64 --limit-train 1024 --limit-test 512 --threads 1 --seed 3 --decay 1e-3 --out run "
      "--resume run");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("recipe.nm"), std::string::npos) << bad.err;
}

}  // namespace

namespace {

// --init + --epochs 0 evaluates the given weights: the test accuracy of the run's last epoch.
TEST_F(TrainCli, InitWithZeroEpochsEvaluatesTheCheckpoint) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const std::string common =
      "train --model mlp --hidden 32 --batch 64 --limit-train 512 --limit-test 256 --threads 1 "
      "--no-plot ";
  const CliResult a = run(common + "--epochs 1 --out run --json a.json");
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  const CliResult e =
      run(common + "--epochs 0 --init run/checkpoint.safetensors --out eval --json e.json");
  ASSERT_EQ(e.status, 0) << e.err << e.out;
  EXPECT_NE(e.out.find("evaluated"), std::string::npos) << e.out;
  const auto ja = nlohmann::json::parse(slurp(dir_ / "a.json"));
  const auto je = nlohmann::json::parse(slurp(dir_ / "e.json"));
  EXPECT_EQ(je.at("status"), "evaluated");
  EXPECT_EQ(je.at("epochs_done"), 0);
  EXPECT_EQ(je.at("config").at("init"), "run/checkpoint.safetensors");
  EXPECT_EQ(je.at("test_accuracy").get<double>(), ja.at("test_accuracy").get<double>());
  EXPECT_FALSE(fs::exists(dir_ / "eval" / "checkpoint.safetensors"));
  bad(common + "--epochs 1 --init missing.safetensors --out x", "missing.safetensors");
  bad("train --model mlp --hidden 16 --epochs 0 --init run/checkpoint.safetensors --out y",
      "model.layers.0.weight");
}

}  // namespace
