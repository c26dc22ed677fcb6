#include "model_writer.h"

#include "nmsparse/core/error.h"
#include "nmsparse/io/dtype.h"

namespace nms::cli {

ModelWriter::ModelWriter(const SafetensorsModel& input, const std::filesystem::path& output,
                         const std::vector<PlannedTensor>& plan,
                         const std::vector<Metadata>& shard_metadata)
    : output_(output), sharded_(input.sharded()) {
  namespace fs = std::filesystem;
  const size_t shards = input.shard_count();
  std::vector<std::vector<TensorSpec>> specs(shards);
  for (const auto& t : plan) {
    specs.at(t.shard).push_back(t.spec);
    int64_t bytes = dtype_size(t.spec.dtype);
    for (int64_t d : t.spec.shape) bytes = detail::mul_checked(bytes, d, "tensor bytes");
    total_size_ += static_cast<uint64_t>(bytes);
  }
  if (sharded_) {
    std::error_code ec;
    fs::create_directories(output_, ec);
    NMS_CHECK(!ec && fs::is_directory(output_), "cannot create the output directory '",
              output_.string(), "': ", ec.message());
  }
  for (size_t s = 0; s < shards; ++s) {
    fs::path path = output_;
    if (sharded_) {
      const std::string file = input.shard_paths()[s].filename().string();
      path = output_ / file;
      for (const auto& spec : specs[s]) weight_map_.emplace_back(spec.name, file);
    }
    writers_.push_back(std::make_unique<SafetensorsWriter>(path, specs[s], shard_metadata.at(s)));
  }
}

std::vector<ModelWriter::Metadata> ModelWriter::inherit_metadata(const SafetensorsModel& input,
                                                                 const Metadata& extra) {
  std::vector<Metadata> out;
  for (size_t s = 0; s < input.shard_count(); ++s) {
    Metadata m = input.shard(s).metadata();
    for (const auto& [k, v] : extra) m[k] = v;
    out.push_back(std::move(m));
  }
  return out;
}

void ModelWriter::commit() {
  for (auto& w : writers_) w->commit();
  if (sharded_)
    write_shard_index(output_ / "model.safetensors.index.json", weight_map_, total_size_);
}

std::string ModelWriter::location() const {
  return sharded_ ? output_.string() + "/ (" + std::to_string(writers_.size()) + " shards + index)"
                  : output_.string();
}

}  // namespace nms::cli
