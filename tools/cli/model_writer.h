// Writes an output model shaped like its input: one .safetensors file for a single-file input,
// or a directory of shards with the same file names plus model.safetensors.index.json for a
// sharded input. Every tensor of the plan must be written once; nothing appears at the final
// paths before commit() (each shard is written to a temporary file and renamed; the index last).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nmsparse/io/safetensors.h"
#include "nmsparse/io/sharded.h"

namespace nms::cli {

struct PlannedTensor {
  size_t shard = 0;
  TensorSpec spec;
};

class ModelWriter {
 public:
  using Metadata = std::map<std::string, std::string>;
  // `shard_metadata[s]` is the complete __metadata__ of output shard s.
  ModelWriter(const SafetensorsModel& input, const std::filesystem::path& output,
              const std::vector<PlannedTensor>& plan, const std::vector<Metadata>& shard_metadata);
  // Each input shard's __metadata__ with `extra` added (extra wins on equal keys).
  static std::vector<Metadata> inherit_metadata(const SafetensorsModel& input,
                                                const Metadata& extra);
  SafetensorsWriter& shard(size_t index) { return *writers_.at(index); }
  void commit();
  // Human-readable description of where the output went.
  std::string location() const;

 private:
  std::filesystem::path output_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsWriter>> writers_;
  std::vector<std::pair<std::string, std::string>> weight_map_;
  uint64_t total_size_ = 0;
};

}  // namespace nms::cli
