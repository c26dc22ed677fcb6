// Models stored as one safetensors file or as Hugging Face style shards.
//
// SafetensorsModel::open accepts
//   - a .safetensors file;
//   - an index file (any path ending in ".json", normally model.safetensors.index.json):
//       {"metadata": {"total_size": <bytes>, ...}, "weight_map": {"<tensor>": "<shard file>", ...}}
//     shard file names are relative to the index's directory;
//   - a directory holding model.safetensors (preferred, as transformers does) or
//     model.safetensors.index.json.
// Opening an index validates it completely and opens (maps) every shard, so errors surface at
// open(), not halfway through a job. nms::Error, naming the index and the offending entry, when
//   - the index is not strict JSON (duplicate keys included) or "weight_map" is missing or not an
//     object of string -> string ("metadata" is optional and otherwise not interpreted);
//   - a shard name is empty, absolute, contains "..", a control character, or a backslash;
//   - a shard is missing or fails SafetensorsFile validation (its message is included);
//   - a tensor of the weight map is absent from its shard, a shard holds a tensor the weight map
//     does not list for it, or a tensor name occurs in two shards.
// Memory: shards are memory-mapped (SafetensorsFile::open), so only pages actually read are loaded.
// The object is movable; Entry::info pointers stay valid for its lifetime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nmsparse/io/safetensors.h"

namespace nms {

inline constexpr std::string_view kSafetensorsSingleFileName = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexFileName = "model.safetensors.index.json";

class SafetensorsModel {
 public:
  static SafetensorsModel open(const std::filesystem::path& path);

  bool sharded() const { return !index_path_.empty(); }
  // Shard files in ascending file-name order (1 entry when not sharded).
  const std::vector<std::filesystem::path>& shard_paths() const { return shard_paths_; }
  size_t shard_count() const { return shards_.size(); }
  // Throws nms::Error if i >= shard_count().
  const SafetensorsFile& shard(size_t i) const;

  struct Entry {
    size_t shard;
    const TensorInfo* info;
  };
  // Every tensor of every shard, in shard order then data-offset order.
  std::vector<Entry> entries() const;
  // The entry for `name`, or std::nullopt.
  std::optional<Entry> find(std::string_view name) const;
  // Total tensor bytes over all shards (what an index's metadata.total_size should say).
  uint64_t total_tensor_bytes() const;
  // The index file; empty when not sharded.
  const std::filesystem::path& index_path() const { return index_path_; }

 private:
  SafetensorsModel() = default;
  void build_lookup();

  std::filesystem::path index_path_;
  std::vector<std::filesystem::path> shard_paths_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Entry, std::less<>> lookup_;
};

// Writes a Hugging Face style index atomically (write_file_atomic):
//   {"metadata": {"total_size": total_size}, "weight_map": {tensor: shard file name, ...}}
// Shard names are written as given and must be relative names following the rules above; tensor
// names must be non-empty and unique. Throws nms::Error naming the offending entry or the path.
void write_shard_index(const std::filesystem::path& index_path,
                       const std::vector<std::pair<std::string, std::string>>& weight_map,
                       uint64_t total_size);

}  // namespace nms
