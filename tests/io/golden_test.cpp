// Files written by the reference Python package (scripts/make_golden_safetensors.py), read back
// with exact expected values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io_test_util.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/io/sharded.h"

namespace nms {
namespace {

using testing_io::from_bytes;

const std::filesystem::path kGolden =
    std::filesystem::path(NMS_TEST_DATA_DIR) / "safetensors" / "golden";
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SafetensorsGolden, AllDtypes) {
  const SafetensorsFile file = SafetensorsFile::open(kGolden / "all_dtypes.safetensors");
  EXPECT_EQ(file.metadata(),
            (std::map<std::string, std::string>{{"producer", "make_golden_safetensors.py"}}));
  EXPECT_EQ(file.tensors().size(), 13u);

  const TensorInfo& f64 = file.at("f64");
  EXPECT_EQ(f64.dtype, DType::kF64);
  EXPECT_EQ(f64.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(from_bytes<double>(file.raw(f64)),
            (std::vector<double>{1.5, -2.25, 1e300, 0.0, -0.0, 3.0}));
  const std::vector<float> f64_as_f32 = file.read_f32(f64);
  EXPECT_EQ(f64_as_f32[2], kInf);
  EXPECT_TRUE(std::signbit(f64_as_f32[4]));

  EXPECT_EQ(file.read_f32(file.at("f32")), (std::vector<float>{1.0f, -0.5f, 3.25f, 1e-40f, kInf}));
  EXPECT_EQ(file.read_f32(file.at("f16")),
            (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24), -kInf}));
  const TensorInfo& bf16 = file.at("bf16");
  EXPECT_EQ(bf16.dtype, DType::kBF16);
  EXPECT_EQ(bf16.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(file.read_f32(bf16), (std::vector<float>{1.0f, -3.5f, 0.15625f, std::ldexp(1.0f, 100),
                                                     -std::ldexp(1.0f, -130), 0.0f}));

  EXPECT_EQ(from_bytes<int64_t>(file.raw(file.at("i64"))),
            (std::vector<int64_t>{-(int64_t{1} << 62), 7}));
  EXPECT_EQ(file.at("i32").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(from_bytes<int32_t>(file.raw(file.at("i32"))), (std::vector<int32_t>{1, -2, 3, -4}));
  EXPECT_EQ(from_bytes<int16_t>(file.raw(file.at("i16"))),
            (std::vector<int16_t>{-32768, 32767, 5}));
  EXPECT_EQ(from_bytes<int8_t>(file.raw(file.at("i8"))), (std::vector<int8_t>{-128, 127, 0, -1}));
  EXPECT_EQ(from_bytes<uint8_t>(file.raw(file.at("u8"))), (std::vector<uint8_t>{0, 255, 17}));
  EXPECT_EQ(file.at("bool").dtype, DType::kBool);
  EXPECT_EQ(from_bytes<uint8_t>(file.raw(file.at("bool"))), (std::vector<uint8_t>{1, 0, 1}));

  const TensorInfo& scalar = file.at("scalar");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.numel, 1);
  EXPECT_EQ(file.read_f32(scalar), std::vector<float>{2.5f});
  const TensorInfo& empty = file.at("empty");
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.numel, 0);
  EXPECT_EQ(empty.byte_size, 0u);

  std::vector<float> weight(12);
  for (int i = 0; i < 12; ++i) weight[i] = static_cast<float>(i) / 4;
  EXPECT_EQ(file.read_f32(file.at("layer.0.weight")), weight);
}

TEST(SafetensorsGolden, NoMetadata) {
  const SafetensorsFile file = SafetensorsFile::open(kGolden / "no_metadata.safetensors");
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(file.read_f32(file.at("w")), (std::vector<float>{1, 2, 3, 4}));
}

TEST(SafetensorsGolden, ShardedModelByIndexAndDirectory) {
  for (const auto& path :
       {kGolden / "sharded" / "model.safetensors.index.json", kGolden / "sharded"}) {
    const SafetensorsModel model = SafetensorsModel::open(path);
    EXPECT_TRUE(model.sharded());
    EXPECT_EQ(model.index_path(), kGolden / "sharded" / "model.safetensors.index.json");
    ASSERT_EQ(model.shard_count(), 2u);
    EXPECT_EQ(model.shard_paths()[0].filename(), "model-00001-of-00002.safetensors");
    const auto entries = model.entries();
    ASSERT_EQ(entries.size(), 3u);
    const auto b = model.find("b.weight");
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->shard, 1u);
    EXPECT_EQ(model.shard(1).read_f32(*b->info), (std::vector<float>{-1, -2, -3, -4}));
    EXPECT_EQ(model.total_tensor_bytes(), 16u + 4u + 8u);
  }
}

}  // namespace
}  // namespace nms
