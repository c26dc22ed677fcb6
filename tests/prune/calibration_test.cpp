// Calibration statistics: the accumulator against direct sums, the file round trip, and every
// defect the reader must name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "nmsparse/io/safetensors.h"
#include "nmsparse/prune/calibration.h"
#include "prune_testing.h"
#include "testing/expect_error.h"

namespace nms {
namespace {

using testing::expect_error;

std::filesystem::path temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nms_calibration_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

TEST(CalibrationAccumulator, MatchesDirectSumsAcrossBatches) {
  const int64_t samples = 37, in = 13;
  const std::vector<double> x = testing::correlated_inputs(samples, in, 1);
  std::vector<float> xf(x.begin(), x.end());
  const LayerCalibration expected = testing::statistics_of(
      std::vector<double>(xf.begin(), xf.end()), samples, in);  // the floats the layer sees
  CalibrationAccumulator acc("fc", in);
  acc.add(xf.data(), 10);  // uneven batches: the sums must not depend on the split
  acc.add(xf.data() + 10 * in, 0);
  acc.add(xf.data() + 10 * in, samples - 10);
  const LayerCalibration got = acc.finish();
  EXPECT_EQ(got.samples, samples);
  // Double sums of the same float products in a different order: relative 1e-12 is ample.
  for (int64_t k = 0; k < in * in; ++k)
    EXPECT_NEAR(got.hessian[k], expected.hessian[k],
                1e-12 * std::fabs(expected.hessian[k]) + 1e-12);
  for (int64_t j = 0; j < in; ++j) {
    EXPECT_NEAR(got.act_norm[j], expected.act_norm[j], 1e-12 * expected.act_norm[j]);
    EXPECT_NEAR(got.input_sum[j], expected.input_sum[j], 1e-12 * samples);
  }
  got.validate();
}

TEST(CalibrationAccumulator, RejectsNonFiniteInputAndEmptyLayers) {
  CalibrationAccumulator acc("fc", 3);
  expect_error([&] { acc.finish(); }, "saw no input");
  const float bad[3] = {1.0f, NAN, 0.0f};
  expect_error([&] { acc.add(bad, 1); }, "non-finite input");
}

class CalibrationFileTest : public ::testing::TestWithParam<CalibrationPrecision> {};

TEST_P(CalibrationFileTest, RoundTripsEveryField) {
  const int64_t in = 8;
  const std::vector<double> x = testing::correlated_inputs(20, in, 2);
  LayerCalibration a = testing::statistics_of(x, 20, in, "model.layers.0");
  LayerCalibration b = testing::statistics_of(x, 20, in, "blocks.1.attn.qkv");
  b.hessian.clear();  // act_norm only (enough for Wanda)
  b.input_sum.clear();
  const auto path = temp_path("roundtrip.safetensors");
  write_calibration(path, {a, b}, GetParam(), {{"source", "test"}});
  const CalibrationFile file = CalibrationFile::open(path);
  ASSERT_EQ(file.layers(), (std::vector<std::string>{"blocks.1.attn.qkv", "model.layers.0"}));
  const LayerCalibration ra = file.read("model.layers.0");
  const LayerCalibration rb = file.read("blocks.1.attn.qkv");
  const double tol = GetParam() == CalibrationPrecision::kF64 ? 0.0 : 1e-6;  // float32 rounding
  ASSERT_EQ(ra.hessian.size(), a.hessian.size());
  for (size_t k = 0; k < a.hessian.size(); ++k)
    EXPECT_NEAR(ra.hessian[k], a.hessian[k], tol * std::fabs(a.hessian[k]));
  for (int64_t j = 0; j < in; ++j) {
    EXPECT_NEAR(ra.act_norm[j], a.act_norm[j], tol * a.act_norm[j]);
    EXPECT_NEAR(ra.input_sum[j], a.input_sum[j], tol * std::fabs(a.input_sum[j]));
  }
  EXPECT_EQ(ra.samples, 20);
  EXPECT_FALSE(rb.has_hessian());
  EXPECT_FALSE(rb.has_input_sum());
  EXPECT_EQ(SafetensorsFile::open(path).metadata().at("source"), "test");
  expect_error([&] { file.read("nope"); }, "no calibration for layer 'nope'");
}

INSTANTIATE_TEST_SUITE_P(Precisions, CalibrationFileTest,
                         ::testing::Values(CalibrationPrecision::kF32, CalibrationPrecision::kF64));

// A valid layer whose tensors the cases below break one at a time.
std::vector<TensorData> layer_tensors(const LayerCalibration& c) {
  auto f32 = [](const std::vector<double>& v) {
    std::vector<std::byte> b(v.size() * 4);
    for (size_t k = 0; k < v.size(); ++k) {
      const auto f = static_cast<float>(v[k]);
      std::memcpy(b.data() + 4 * k, &f, 4);
    }
    return b;
  };
  std::vector<std::byte> samples(8);
  std::memcpy(samples.data(), &c.samples, 8);
  return {{{c.name + ".hessian", DType::kF32, {c.in, c.in}}, f32(c.hessian)},
          {{c.name + ".act_norm", DType::kF32, {c.in}}, f32(c.act_norm)},
          {{c.name + ".samples", DType::kI64, {}}, samples}};
}

TEST(CalibrationFile, NamesEveryDefect) {
  const int64_t in = 4;
  const LayerCalibration good =
      testing::statistics_of(testing::correlated_inputs(9, in, 3), 9, in, "fc");
  const auto path = temp_path("defect.safetensors");
  const std::map<std::string, std::string> meta = {{"nmsparse.calibration", "1"}};
  const auto open_with = [&](std::vector<TensorData> t, std::map<std::string, std::string> m) {
    write_safetensors(path, t, m);
    return CalibrationFile::open(path);
  };
  expect_error([&] { open_with(layer_tensors(good), {}); }, "not a calibration file");
  expect_error(
      [&] {
        open_with(layer_tensors(good), {{"nmsparse.calibration", "9"}});
      },
      "format version '9'");
  {
    auto t = layer_tensors(good);
    t.push_back({{"fc.weight", DType::kF32, {1}}, std::vector<std::byte>(4)});
    expect_error([&] { open_with(t, meta); }, "'fc.weight' is not a calibration tensor");
  }
  {
    auto t = layer_tensors(good);
    t.erase(t.begin() + 1);
    expect_error([&] { open_with(t, meta); }, "has no tensor 'fc.act_norm'");
  }
  {
    auto t = layer_tensors(good);
    t[0].spec.shape = {in, in - 1};
    t[0].bytes.resize(static_cast<size_t>(in * (in - 1) * 4));
    expect_error([&] { open_with(t, meta); }, "'fc.hessian' must be [4, 4]");
  }
  {
    auto t = layer_tensors(good);
    t[2].spec.dtype = DType::kI32;
    t[2].bytes.resize(4);
    expect_error([&] { open_with(t, meta); }, "'fc.samples' must be I64");
  }
  const auto read_with = [&](const LayerCalibration& c) {
    return open_with(layer_tensors(c), meta).read("fc");
  };
  {
    LayerCalibration c = good;
    c.hessian[1] = NAN;
    expect_error([&] { read_with(c); }, "non-finite value");
  }
  {
    LayerCalibration c = good;
    c.hessian[1 * in + 2] += 0.5 * std::fabs(c.hessian[1 * in + 2]) + 0.1;
    expect_error([&] { read_with(c); }, "not symmetric");
  }
  {
    LayerCalibration c = good;  // |H01| > sqrt(H00 H11): no Gram matrix looks like this
    const double big = 2.0 * std::sqrt(c.hessian[0] * c.hessian[in + 1]);
    c.hessian[1] = c.hessian[in] = big;
    expect_error([&] { read_with(c); }, "not positive semi-definite");
  }
  {
    LayerCalibration c = good;
    c.act_norm[2] *= 1.5;
    expect_error([&] { read_with(c); }, "act_norm[2]^2");
  }
  {
    LayerCalibration c = good;
    c.samples = 0;
    expect_error([&] { read_with(c); }, "samples (0)");
  }
  EXPECT_NO_THROW(read_with(good));
}

TEST(CalibrationFile, WriterValidatesBeforeWriting) {
  LayerCalibration bad = testing::statistics_of(testing::correlated_inputs(5, 3, 4), 5, 3, "fc");
  bad.act_norm[0] = -1.0;
  const auto path = temp_path("never.safetensors");
  std::filesystem::remove(path);
  expect_error([&] { write_calibration(path, {bad}); }, "act_norm[0] = -1");
  EXPECT_FALSE(std::filesystem::exists(path));
  expect_error([&] { write_calibration(path, {}); }, "no layer");
}

TEST(CalibrationLayerOf, StripsOnlyTheWeightSuffix) {
  EXPECT_EQ(calibration_layer_of("model.layers.0.weight"), "model.layers.0");
  EXPECT_EQ(calibration_layer_of("w"), "w");
  EXPECT_EQ(calibration_layer_of(".weight"), ".weight");
  EXPECT_EQ(calibration_layer_of("a.weights"), "a.weights");
}

}  // namespace
}  // namespace nms
