// End-to-end tests of `nmsparse calibrate` (runs the real binary): errors that name the bad value,
// and, when Fashion-MNIST is installed, a calibration of a tiny trained mlp read back with
// CalibrationFile.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nmsparse/prune/calibration.h"
#include "testing/cli_fixture.h"

namespace fs = std::filesystem;

namespace {

using nms::testing::CliResult;
using nms::testing::slurp;

// A valid safetensors file with one F32 tensor "w" [1] and no training metadata.
void write_plain_safetensors(const fs::path& p) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header;
  f.write("\0\0\0\0", 4);
}

using CalibrateCli = nms::testing::CliFixture;

TEST_F(CalibrateCli, ErrorsNameTheValue) {
  bad("calibrate --from missing.safetensors out.safetensors", "missing.safetensors");
  write_plain_safetensors(dir_ / "plain.safetensors");
  bad("calibrate --from plain.safetensors out.safetensors", "not a training checkpoint");
  bad("calibrate --from plain.safetensors --precision f16 out.safetensors",
      "unknown --precision 'f16'");
  bad("calibrate --from plain.safetensors plain.safetensors", "is the input");
  bad("calibrate out.safetensors", "--from");
  EXPECT_FALSE(fs::exists(dir_ / "out.safetensors"));
}

TEST_F(CalibrateCli, CalibratesATrainedMlp) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  }
  const CliResult t = run(
      "train --model mlp --hidden 32,16 --epochs 1 --batch 64 --limit-train 256 --limit-test 128 "
      "--threads 1 --no-plot -q --out run");
  ASSERT_EQ(t.status, 0) << t.err;
  const CliResult r =
      run("calibrate --from run --samples 100 --batch 64 --threads 1 --json c.json "
          "calib.safetensors");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("model.layers.1"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(dir_ / "c.json"));
  EXPECT_EQ(j.at("examples"), 100);
  const nms::CalibrationFile f = nms::CalibrationFile::open(dir_ / "calib.safetensors");
  EXPECT_EQ(f.layers(), (std::vector<std::string>{"model.layers.0", "model.layers.1"}));
  const nms::LayerCalibration l = f.read("model.layers.1");
  EXPECT_EQ(l.in, 32);
  EXPECT_EQ(l.samples, 100);
  EXPECT_TRUE(l.has_hessian());
  EXPECT_TRUE(l.has_input_sum());
  // --no-hessian, f64, head included.
  const CliResult h =
      run("calibrate --from run/checkpoint.safetensors --samples 10 --no-hessian "
          "--include-head --precision f64 -q nohess.safetensors");
  ASSERT_EQ(h.status, 0) << h.err;
  const nms::CalibrationFile g = nms::CalibrationFile::open(dir_ / "nohess.safetensors");
  EXPECT_TRUE(g.contains("model.head"));
  EXPECT_FALSE(g.read("model.layers.0").has_hessian());
  bad("calibrate --from run --samples 70000 x.safetensors", "samples (70000)");
}

}  // namespace
