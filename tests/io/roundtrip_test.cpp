// Write -> read round trips through SafetensorsWriter / write_safetensors and SafetensorsFile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "io_test_util.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/io/safetensors.h"

namespace nms {
namespace {

using testing_io::from_bytes;
using testing_io::ScratchDir;
using testing_io::to_bytes;

TEST(SafetensorsRoundTrip, EveryDtypeShapeAndMetadata) {
  ScratchDir dir;
  const auto path = dir / "all.safetensors";
  std::vector<TensorData> tensors;
  tensors.push_back({{"f64", DType::kF64, {2, 2}}, to_bytes<double>({1.5, -2.0, 1e300, -0.0})});
  tensors.push_back({{"f32", DType::kF32, {3}}, to_bytes<float>({1.0f, -0.25f, 3e38f})});
  tensors.push_back({{"f16", DType::kF16, {2}}, to_bytes<uint16_t>({0x3c00, 0xc000})});
  tensors.push_back({{"bf16", DType::kBF16, {1, 2}}, to_bytes<uint16_t>({0x3f80, 0xc060})});
  tensors.push_back({{"i64", DType::kI64, {2}}, to_bytes<int64_t>({-(int64_t{1} << 62), 9})});
  tensors.push_back({{"i32", DType::kI32, {1}}, to_bytes<int32_t>({-7})});
  tensors.push_back({{"i16", DType::kI16, {3}}, to_bytes<int16_t>({-32768, 0, 32767})});
  tensors.push_back({{"i8", DType::kI8, {2}}, to_bytes<int8_t>({-128, 127})});
  tensors.push_back({{"u8", DType::kU8, {3}}, to_bytes<uint8_t>({0, 128, 255})});
  tensors.push_back({{"bool", DType::kBool, {2}}, to_bytes<uint8_t>({1, 0})});
  tensors.push_back({{"scalar", DType::kF32, {}}, to_bytes<float>({42.0f})});
  tensors.push_back({{"empty", DType::kF16, {0, 5}}, {}});
  tensors.push_back({{"empty_1d", DType::kI64, {0}}, {}});
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
  write_safetensors(path, tensors, metadata);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.header_size() % 8, 0u);
  EXPECT_EQ(file.file_size(), std::filesystem::file_size(path));
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const TensorData& t : tensors) {
    const TensorInfo& info = file.at(t.spec.name);
    EXPECT_EQ(info.name, t.spec.name);
    EXPECT_EQ(info.dtype, t.spec.dtype) << t.spec.name;
    EXPECT_EQ(info.shape, t.spec.shape) << t.spec.name;
    const int64_t numel =
        std::accumulate(t.spec.shape.begin(), t.spec.shape.end(), int64_t{1}, std::multiplies<>());
    EXPECT_EQ(info.numel, numel) << t.spec.name;
    EXPECT_EQ(info.byte_size, t.bytes.size()) << t.spec.name;
    const auto raw = file.raw(info);
    ASSERT_EQ(raw.size(), t.bytes.size());
    EXPECT_TRUE(std::equal(raw.begin(), raw.end(), t.bytes.begin())) << t.spec.name;
  }
  // Data buffer starts 8-byte aligned and tensors are ordered by offset.
  EXPECT_EQ((8 + file.header_size()) % 8, 0u);
  for (size_t i = 1; i < file.tensors().size(); ++i) {
    EXPECT_LE(file.tensors()[i - 1].data_offset, file.tensors()[i].data_offset);
  }
  EXPECT_EQ(file.at("scalar").numel, 1);
  EXPECT_EQ(file.at("empty").numel, 0);
  EXPECT_TRUE(file.read_f32(file.at("empty")).empty());
  EXPECT_EQ(file.read_f32(file.at("scalar")), std::vector<float>{42.0f});
}

TEST(SafetensorsRoundTrip, FloatConversionsOnRead) {
  ScratchDir dir;
  const auto path = dir / "conv.safetensors";
  write_safetensors(
      path,
      {{{"f16", DType::kF16, {5}}, to_bytes<uint16_t>({0x3c00, 0xc000, 0x0001, 0x7c00, 0x3555})},
       {{"bf16", DType::kBF16, {3}}, to_bytes<uint16_t>({0x3f80, 0xc060, 0x7f80})},
       {{"f64", DType::kF64, {3}}, to_bytes<double>({0.1, -1e300, 1e-50})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  const std::vector<float> f16 = file.read_f32(file.at("f16"));
  EXPECT_EQ(f16[0], 1.0f);
  EXPECT_EQ(f16[1], -2.0f);
  EXPECT_EQ(f16[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(f16[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16[4], 0.333251953125f);
  EXPECT_EQ(file.read_f32(file.at("bf16")),
            (std::vector<float>{1.0f, -3.5f, std::numeric_limits<float>::infinity()}));
  const std::vector<float> f64 = file.read_f32(file.at("f64"));
  EXPECT_EQ(f64[0], 0.1f);
  EXPECT_EQ(f64[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f64[2], 0.0f);

  std::vector<float> dst(5);
  file.read_f32_into(file.at("f16"), dst);
  EXPECT_EQ(dst, f16);
  std::vector<float> wrong(4);
  EXPECT_THROW(file.read_f32_into(file.at("f16"), wrong), Error);
}

TEST(SafetensorsRoundTrip, WriteF32ConvertsToTheSpecDtype) {
  ScratchDir dir;
  const auto path = dir / "w.safetensors";
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 70000.0f, 1e-8f, -0.0f};
  {
    SafetensorsWriter writer(path, {{"a32", DType::kF32, {2, 3}},
                                    {"a16", DType::kF16, {6}},
                                    {"ab16", DType::kBF16, {3, 2}},
                                    {"a64", DType::kF64, {6}}});
    // Any order.
    writer.write_f32("ab16", values);
    writer.write_f32("a64", values);
    writer.write_f32("a32", values);
    writer.write_f32("a16", values);
    writer.commit();
  }
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32(file.at("a32")), values);
  const auto f16_bits = from_bytes<uint16_t>(file.raw(file.at("a16")));
  const auto bf16_bits = from_bytes<uint16_t>(file.raw(file.at("ab16")));
  const auto f64 = from_bytes<double>(file.raw(file.at("a64")));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f16_bits[i], f32_to_f16(values[i])) << i;
    EXPECT_EQ(bf16_bits[i], f32_to_bf16(values[i])) << i;
    EXPECT_EQ(f64[i], static_cast<double>(values[i])) << i;
  }
  EXPECT_EQ(file.read_f32(file.at("a16"))[3], std::numeric_limits<float>::infinity());
}

TEST(SafetensorsRoundTrip, LargeTensorWrittenInChunks) {
  ScratchDir dir;
  const auto path = dir / "big.safetensors";
  std::vector<float> values(100'003);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 977) * 0.5f;
  {
    SafetensorsWriter writer(path, {{"h", DType::kF16, {100'003}}, {"f", DType::kF32, {100'003}}});
    writer.write_f32("h", values);
    writer.write("f", std::as_bytes(std::span<const float>(values)));
    writer.commit();
  }
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32(file.at("h")), values);  // all values are exact in fp16
  EXPECT_EQ(file.read_f32(file.at("f")), values);
}

TEST(SafetensorsRoundTrip, EmptyFileHasNoTensors) {
  ScratchDir dir;
  const auto path = dir / "none.safetensors";
  write_safetensors(path, {});
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.find("x"), nullptr);
}

TEST(SafetensorsRoundTrip, FromBytesMatchesOpen) {
  ScratchDir dir;
  const auto path = dir / "b.safetensors";
  write_safetensors(path, {{{"x", DType::kI32, {2}}, to_bytes<int32_t>({5, -6})}}, {{"k", "v"}});
  const std::vector<uint8_t> bytes = testing_io::read_file(path);
  const SafetensorsFile file = SafetensorsFile::from_bytes(bytes, "label");
  EXPECT_EQ(file.path(), "label");
  EXPECT_EQ(from_bytes<int32_t>(file.raw(file.at("x"))), (std::vector<int32_t>{5, -6}));
  EXPECT_EQ(file.metadata().at("k"), "v");
}

TEST(SafetensorsRoundTrip, MovedFileKeepsPointersValid) {
  ScratchDir dir;
  const auto path = dir / "m.safetensors";
  write_safetensors(path, {{{"x", DType::kF32, {1}}, to_bytes<float>({3.0f})}});
  SafetensorsFile a = SafetensorsFile::open(path);
  const TensorInfo* info = a.find("x");
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.find("x"), info);
  EXPECT_EQ(b.read_f32(*info), std::vector<float>{3.0f});
}

TEST(SafetensorsRoundTrip, ReaderErrorsNameTensorAndDtype) {
  ScratchDir dir;
  const auto path = dir / "e.safetensors";
  write_safetensors(path, {{{"ints", DType::kI32, {1}}, to_bytes<int32_t>({1})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  try {
    (void)file.read_f32(file.at("ints"));
    FAIL() << "expected nms::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'ints'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos) << e.what();
  }
  try {
    (void)file.at("nope");
    FAIL() << "expected nms::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("e.safetensors"), std::string::npos) << e.what();
  }
  // A TensorInfo that does not belong to the file is refused, not read out of bounds.
  TensorInfo forged = file.at("ints");
  forged.data_offset = file.file_size();
  EXPECT_THROW((void)file.raw(forged), Error);
}

}  // namespace
}  // namespace nms
