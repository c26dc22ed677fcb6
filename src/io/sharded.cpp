// SafetensorsModel (single file, HF index, or directory) and write_shard_index.
#include "nmsparse/io/sharded.h"

#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "io/quote.h"
#include "io/strict_json.h"
#include "nmsparse/core/error.h"
#include "nmsparse/io/atomic_file.h"

namespace nms {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxIndexSize = 100'000'000;

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Empty string if `name` is an acceptable shard file name, else the reason.
std::string shard_name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.front() == '/') return "is an absolute path";
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "contains a control character";
    if (c == '\\') return "contains a backslash";
  }
  for (const auto& part : std::filesystem::path(name)) {
    if (part == "..") return "contains a '..' component";
  }
  return {};
}

SafetensorsModel::Entry make_entry(size_t shard, const TensorInfo& info) {
  return SafetensorsModel::Entry{shard, &info};
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path single = path / kSafetensorsSingleFileName;
    const std::filesystem::path index = path / kSafetensorsIndexFileName;
    if (std::filesystem::exists(single, ec)) return open(single);
    if (std::filesystem::exists(index, ec)) return open(index);
    throw Error(detail::concat("SafetensorsModel::open: ", path.string(),
                               ": directory holds neither ", kSafetensorsSingleFileName, " nor ",
                               kSafetensorsIndexFileName));
  }

  SafetensorsModel model;
  if (!ends_with(path.filename().string(), ".json")) {
    model.shard_paths_.push_back(path);
    model.shards_.push_back(SafetensorsFile::open(path));
    model.build_lookup();
    return model;
  }

  const std::string context = detail::concat("SafetensorsModel::open: ", path.string());
  const detail::ReadOnlyMapping mapping = detail::ReadOnlyMapping::open(path, context);
  const std::span<const std::byte> bytes = mapping.bytes();
  if (bytes.size() > kMaxIndexSize) {
    throw Error(detail::concat(context, ": index is ", bytes.size(), " bytes, over the limit of ",
                               kMaxIndexSize));
  }
  const json root = detail::parse_strict_json(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
      detail::concat(context, ": index"));
  if (!root.is_object()) {
    throw Error(detail::concat(context, ": index is not a JSON object (", root.type_name(), ")"));
  }
  if (root.contains("metadata") && !root.at("metadata").is_object()) {
    throw Error(detail::concat(context, ": index \"metadata\" is not an object"));
  }
  if (!root.contains("weight_map")) {
    throw Error(detail::concat(context, ": index has no \"weight_map\""));
  }
  const json& weight_map = root.at("weight_map");
  if (!weight_map.is_object()) {
    throw Error(detail::concat(context, ": index \"weight_map\" is not an object (",
                               weight_map.type_name(), ")"));
  }

  // tensor -> shard name, and the set of shard names in ascending order.
  std::map<std::string, std::string, std::less<>> wanted;
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (tensor.empty())
      throw Error(detail::concat(context, ": weight_map has an empty tensor name"));
    if (!shard.is_string()) {
      throw Error(detail::concat(context, ": weight_map entry ", detail::quote_untrusted(tensor),
                                 " is not a string (", shard.type_name(), ")"));
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    if (const std::string problem = shard_name_problem(shard_name); !problem.empty()) {
      throw Error(detail::concat(context, ": shard name ", detail::quote_untrusted(shard_name),
                                 " of tensor ", detail::quote_untrusted(tensor), " ", problem));
    }
    wanted.emplace(tensor, shard_name);
    shard_names.insert(shard_name);
  }

  model.index_path_ = path;
  const std::filesystem::path dir = path.parent_path();
  const std::vector<std::string> names(shard_names.begin(), shard_names.end());
  std::map<std::string, size_t> shard_number;
  for (const std::string& name : names) {
    const std::filesystem::path shard_path = dir / name;
    try {
      model.shards_.push_back(SafetensorsFile::open(shard_path));
    } catch (const Error& e) {
      throw Error(
          detail::concat(context, ": shard ", detail::quote_untrusted(name), ": ", e.what()));
    }
    shard_number.emplace(name, model.shard_paths_.size());
    model.shard_paths_.push_back(shard_path);
  }

  // Every shard tensor must be listed for that shard, and every listed tensor must be there.
  for (size_t s = 0; s < model.shards_.size(); ++s) {
    const std::string& shard_name = names[s];
    for (const TensorInfo& info : model.shards_[s].tensors()) {
      const auto it = wanted.find(info.name);
      if (it == wanted.end()) {
        throw Error(detail::concat(context, ": shard ", detail::quote_untrusted(shard_name),
                                   " holds tensor ", detail::quote_untrusted(info.name),
                                   ", which the weight_map does not list"));
      }
      if (it->second != shard_name) {
        throw Error(detail::concat(context, ": tensor ", detail::quote_untrusted(info.name),
                                   " is in shard ", detail::quote_untrusted(shard_name),
                                   " but the weight_map places it in ",
                                   detail::quote_untrusted(it->second)));
      }
    }
  }
  for (const auto& [tensor, shard_name] : wanted) {
    const size_t s = shard_number.at(shard_name);
    if (model.shards_[s].find(tensor) == nullptr) {
      throw Error(detail::concat(context, ": tensor ", detail::quote_untrusted(tensor),
                                 " is missing from shard ", detail::quote_untrusted(shard_name)));
    }
  }
  model.build_lookup();
  return model;
}

void SafetensorsModel::build_lookup() {
  lookup_.clear();
  for (size_t s = 0; s < shards_.size(); ++s) {
    for (const TensorInfo& info : shards_[s].tensors()) {
      const auto [it, inserted] = lookup_.emplace(info.name, make_entry(s, info));
      if (!inserted) {
        throw Error(detail::concat("SafetensorsModel::open: tensor ",
                                   detail::quote_untrusted(info.name), " occurs in both ",
                                   shard_paths_[it->second.shard].string(), " and ",
                                   shard_paths_[s].string()));
      }
    }
  }
}

const SafetensorsFile& SafetensorsModel::shard(size_t i) const {
  NMS_CHECK(i < shards_.size(), "shard index ", i, " out of range (", shards_.size(), " shards)");
  return shards_[i];
}

std::vector<SafetensorsModel::Entry> SafetensorsModel::entries() const {
  std::vector<Entry> out;
  out.reserve(lookup_.size());
  for (size_t s = 0; s < shards_.size(); ++s) {
    for (const TensorInfo& info : shards_[s].tensors()) out.push_back(make_entry(s, info));
  }
  return out;
}

std::optional<SafetensorsModel::Entry> SafetensorsModel::find(std::string_view name) const {
  const auto it = lookup_.find(name);
  if (it == lookup_.end()) return std::nullopt;
  return it->second;
}

uint64_t SafetensorsModel::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const SafetensorsFile& file : shards_) {
    for (const TensorInfo& info : file.tensors()) total += info.byte_size;
  }
  return total;
}

void write_shard_index(const std::filesystem::path& index_path,
                       const std::vector<std::pair<std::string, std::string>>& weight_map,
                       uint64_t total_size) {
  const std::string context = detail::concat("write_shard_index: ", index_path.string());
  json map = json::object();
  for (const auto& [tensor, shard] : weight_map) {
    if (tensor.empty()) throw Error(detail::concat(context, ": empty tensor name"));
    if (const std::string problem = shard_name_problem(shard); !problem.empty()) {
      throw Error(detail::concat(context, ": shard name ", detail::quote_untrusted(shard),
                                 " of tensor ", detail::quote_untrusted(tensor), " ", problem));
    }
    if (map.contains(tensor)) {
      throw Error(
          detail::concat(context, ": tensor ", detail::quote_untrusted(tensor), " listed twice"));
    }
    map[tensor] = shard;
  }
  const json root = {{"metadata", {{"total_size", total_size}}}, {"weight_map", std::move(map)}};
  std::string text;
  try {
    text = root.dump(2) + "\n";
  } catch (const json::exception& ex) {
    throw Error(detail::concat(context, ": names must be valid UTF-8 (",
                               detail::quote_untrusted(ex.what(), 160), ")"));
  }
  write_file_atomic(index_path, text);
}

}  // namespace nms
