// End-to-end tests of `nmsparse train` (runs the real binary): usage errors, a missing dataset,
// and, when Fashion-MNIST is installed, a short run with its outputs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("nmsparse_train_cli_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args, const std::string& env = "") {
    const fs::path out = dir_ / ".stdout";
    const fs::path err = dir_ / ".stderr";
    const std::string cmd = "cd '" + dir_.string() + "' && " + env + " '" NMS_CLI_PATH "' " + args +
                            " > '" + out.string() + "' 2> '" + err.string() + "'";
    const int raw = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  void expect_error(const std::string& args, const std::string& text) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << args << "\nstderr: " << r.err;
  }

  fs::path dir_;
};

TEST_F(TrainCli, UsageErrorsNameTheValue) {
  expect_error("train --out o --weights sparse", "unknown --weights 'sparse'");
  expect_error("train --out o --grads mvu", "unknown --grads 'mvu'");
  expect_error("train --out o --model resnet", "unknown --model 'resnet'");
  expect_error("train --out o --path fast", "unknown --path 'fast'");
  expect_error("train --out o --solver lp", "unknown --solver 'lp'");
  expect_error("train --out o --nm 5:4", "--nm '5:4'");
  expect_error("train --out o --epochs -1", "epochs (-1)");
  expect_error("train --out o --epochs 0 --resume r", "epochs 0 evaluates");
  expect_error("train --out o --compare dense,foo+mvue", "unknown weight mode 'foo'");
  expect_error("train --out o --recipe r.json --weights nm", "excludes");
  expect_error("train --out o --recipe missing.json", "missing.json");
  expect_error("train --out o --optimizer adam", "unknown --optimizer 'adam'");
  const Result r = run("train");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}

TEST_F(TrainCli, MissingDatasetSaysWhichPackage) {
  const Result r = run("train --out o --epochs 1", "NMSPARSE_FASHION_MNIST=/nonexistent/fmnist");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("dataset-fashion-mnist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/fmnist"), std::string::npos) << r.err;
}

TEST_F(TrainCli, ShortRunOnFashionMnist) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const Result r = run(
      "train --model mlp --hidden 64,64 --weights transposable --grads mvue --nm 2:4 --epochs 1 "
      "--batch 64 --limit-train 1024 --limit-test 512 --threads 1 --seed 3 --out run --json "
      "r.json --no-plot");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(skipped:"), std::string::npos) << r.out;  // the head
  const auto j = nlohmann::json::parse(slurp(dir_ / "r.json"));
  EXPECT_EQ(j.at("status"), "finished");
  EXPECT_GT(j.at("test_accuracy").get<double>(), 0.3);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoint.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "report.json"));
  // Resuming with another pattern names the field.
  const Result bad = run(
      "train --model mlp --hidden 64,64 --weights transposable --grads mvue --nm 4:8 --epochs 1 "
      "--batch 64 --limit-train 1024 --limit-test 512 --threads 1 --seed 3 --out run --resume run");
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
  const Result a = run(common + "--epochs 1 --out run --json a.json");
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  const Result e =
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
  expect_error(common + "--epochs 1 --init missing.safetensors --out x", "missing.safetensors");
  expect_error("train --model mlp --hidden 16 --epochs 0 --init run/checkpoint.safetensors --out y",
               "model.layers.0.weight");
}

}  // namespace
