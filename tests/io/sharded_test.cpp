// SafetensorsModel over single files, HF indexes and directories; write_shard_index.
#include <gtest/gtest.h>

#include <functional>

#include "io_test_util.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/sharded.h"

namespace nms {
namespace {

using testing_io::contains;
using testing_io::error_of;
using testing_io::ScratchDir;
using testing_io::to_bytes;
using testing_io::write_text;

// Two shards + index in `dir`: shard 1 holds a, b; shard 2 holds c.
void write_two_shards(const ScratchDir& dir) {
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{{"b", DType::kF32, {2}}, to_bytes<float>({1, 2})},
                     {{"a", DType::kU8, {3}}, to_bytes<uint8_t>({7, 8, 9})}});
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {{{"c", DType::kF16, {1}}, to_bytes<uint16_t>({0x3c00})}});
  write_shard_index(dir / "model.safetensors.index.json",
                    {{"a", "model-00001-of-00002.safetensors"},
                     {"b", "model-00001-of-00002.safetensors"},
                     {"c", "model-00002-of-00002.safetensors"}},
                    8 + 3 + 2);
}

TEST(SafetensorsModel, ShardedByIndexAndByDirectory) {
  ScratchDir dir;
  write_two_shards(dir);
  for (const auto& path : {dir / "model.safetensors.index.json", dir.path()}) {
    const SafetensorsModel model = SafetensorsModel::open(path);
    EXPECT_TRUE(model.sharded());
    EXPECT_EQ(model.index_path(), dir / "model.safetensors.index.json");
    ASSERT_EQ(model.shard_count(), 2u);
    EXPECT_EQ(model.shard_paths()[0], dir / "model-00001-of-00002.safetensors");
    EXPECT_EQ(model.shard_paths()[1], dir / "model-00002-of-00002.safetensors");
    const auto entries = model.entries();
    ASSERT_EQ(entries.size(), 3u);
    // Shard order, then offset order (b was written first in shard 1).
    EXPECT_EQ(entries[0].shard, 0u);
    EXPECT_EQ(entries[0].info->name, "b");
    EXPECT_EQ(entries[1].info->name, "a");
    EXPECT_EQ(entries[2].shard, 1u);
    EXPECT_EQ(entries[2].info->name, "c");
    EXPECT_EQ(model.shard(1).read_f32(*entries[2].info), std::vector<float>{1.0f});
    EXPECT_EQ(model.total_tensor_bytes(), 13u);
    EXPECT_FALSE(model.find("zzz").has_value());
    EXPECT_THROW((void)model.shard(2), Error);
  }
}

TEST(SafetensorsModel, IndexFileContents) {
  ScratchDir dir;
  write_two_shards(dir);
  std::ifstream in(dir / "model.safetensors.index.json");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(contains(text, "\"total_size\": 13")) << text;
  EXPECT_TRUE(contains(text, "\"a\": \"model-00001-of-00002.safetensors\"")) << text;
}

TEST(SafetensorsModel, SingleFileAndDirectoryWithSingleFile) {
  ScratchDir dir;
  write_safetensors(dir / "model.safetensors", {{{"w", DType::kF32, {1}}, to_bytes<float>({5})}});
  for (const auto& path : {dir / "model.safetensors", dir.path()}) {
    const SafetensorsModel model = SafetensorsModel::open(path);
    EXPECT_FALSE(model.sharded());
    EXPECT_TRUE(model.index_path().empty());
    ASSERT_EQ(model.shard_count(), 1u);
    EXPECT_EQ(model.shard_paths()[0], dir / "model.safetensors");
    ASSERT_EQ(model.entries().size(), 1u);
    EXPECT_EQ(model.entries()[0].info->name, "w");
  }
}

TEST(SafetensorsModel, MovedModelKeepsEntriesValid) {
  ScratchDir dir;
  write_two_shards(dir);
  SafetensorsModel a = SafetensorsModel::open(dir.path());
  const auto entries = a.entries();
  SafetensorsModel b = std::move(a);
  EXPECT_EQ(b.entries()[2].info, entries[2].info);
  EXPECT_EQ(b.find("c")->info, entries[2].info);
}

TEST(SafetensorsModel, Errors) {
  ScratchDir dir;
  write_two_shards(dir);
  const auto index = dir / "model.safetensors.index.json";
  auto open_error = [&] { return error_of([&] { (void)SafetensorsModel::open(index); }); };

  // Tensor named in the index but absent from its shard.
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors",
    "d": "model-00002-of-00002.safetensors"}})");
  EXPECT_TRUE(
      contains(open_error(), "tensor 'd' is missing from shard 'model-00002-of-00002.safetensors'"))
      << open_error();

  // Shard tensor not listed in the index.
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"}})");
  EXPECT_TRUE(contains(open_error(),
                       "shard 'model-00001-of-00002.safetensors' holds tensor 'b', "
                       "which the weight_map does not list"))
      << open_error();
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})");
  EXPECT_TRUE(contains(open_error(), "tensor 'c' is missing from shard")) << open_error();

  // Tensor listed for the wrong shard.
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
    "b": "model-00002-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  EXPECT_TRUE(contains(open_error(), "but the weight_map places it in")) << open_error();

  // Missing shard file.
  write_text(index, R"({"weight_map": {"a": "model-00003-of-00003.safetensors"}})");
  std::string what = open_error();
  EXPECT_TRUE(contains(what, index.string())) << what;
  EXPECT_TRUE(contains(what, "shard 'model-00003-of-00003.safetensors'")) << what;
  EXPECT_TRUE(contains(what, "No such file or directory")) << what;

  // Malformed index JSON, duplicates, wrong types.
  write_text(index, R"({"weight_map": {"a": "x.safetensors",)");
  EXPECT_TRUE(contains(open_error(), "index: invalid JSON at byte")) << open_error();
  write_text(index, R"({"weight_map": {"a": "s1", "a": "s2"}})");
  EXPECT_TRUE(contains(open_error(), "duplicate key 'a'")) << open_error();
  write_text(index, R"({"metadata": {}})");
  EXPECT_TRUE(contains(open_error(), "has no \"weight_map\"")) << open_error();
  write_text(index, R"({"weight_map": []})");
  EXPECT_TRUE(contains(open_error(), "\"weight_map\" is not an object")) << open_error();
  write_text(index, R"({"weight_map": {"a": 3}})");
  EXPECT_TRUE(contains(open_error(), "weight_map entry 'a' is not a string")) << open_error();
  write_text(index, R"([])");
  EXPECT_TRUE(contains(open_error(), "index is not a JSON object")) << open_error();

  // Hostile shard names.
  write_text(index, R"({"weight_map": {"a": "../outside.safetensors"}})");
  EXPECT_TRUE(contains(open_error(), "contains a '..' component")) << open_error();
  write_text(index, R"({"weight_map": {"a": "/etc/passwd"}})");
  EXPECT_TRUE(contains(open_error(), "is an absolute path")) << open_error();
  write_text(index, R"({"weight_map": {"a": ""}})");
  EXPECT_TRUE(contains(open_error(), "is empty")) << open_error();

  // A corrupt shard: the shard's own validation message is included.
  write_text(dir / "bad.safetensors", "garbage!garbage!");
  write_text(index, R"({"weight_map": {"a": "bad.safetensors"}})");
  EXPECT_TRUE(contains(open_error(), "shard 'bad.safetensors': SafetensorsFile::open: "))
      << open_error();
  EXPECT_TRUE(contains(open_error(), "exceeds the limit of 100000000 bytes")) << open_error();

  // A directory with neither file.
  ScratchDir empty;
  EXPECT_TRUE(contains(error_of([&] { (void)SafetensorsModel::open(empty.path()); }),
                       "directory holds neither model.safetensors nor "
                       "model.safetensors.index.json"));
}

TEST(SafetensorsModel, DuplicateTensorAcrossShardsIsRefused) {
  ScratchDir dir;
  write_safetensors(dir / "s1.safetensors", {{{"a", DType::kU8, {1}}, to_bytes<uint8_t>({1})}});
  write_safetensors(dir / "s2.safetensors", {{{"a", DType::kU8, {1}}, to_bytes<uint8_t>({2})}});
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  // s2 is not referenced, so it is simply not part of the model.
  EXPECT_EQ(SafetensorsModel::open(dir.path()).shard_count(), 1u);
}

TEST(WriteShardIndex, RejectsBadEntries) {
  ScratchDir dir;
  const auto index = dir / "i.json";
  EXPECT_TRUE(contains(error_of([&] {
                         write_shard_index(index, {{"a", "s"}, {"a", "s"}}, 0);
                       }),
                       "tensor 'a' listed twice"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_shard_index(index, {{"", "s"}}, 0);
                       }),
                       "empty tensor name"));
  EXPECT_TRUE(contains(error_of([&] { write_shard_index(index, {{"a", "../s"}}, 0); }), "'..'"));
  EXPECT_TRUE(dir.listing().empty());
}

}  // namespace
}  // namespace nms
