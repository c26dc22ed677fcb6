// Rebuilding a run's options from its config JSON, and its model from a checkpoint (train.h).
#include <nlohmann/json.hpp>

#include "nmsparse/core/error.h"
#include "nmsparse/torch/train.h"

namespace nms {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kCheckpointName = "checkpoint.safetensors";
constexpr const char* kMetaConfig = "nmsparse.train.config";

template <class T>
T field(const json& j, const char* key, const char* where) {
  NMS_CHECK(j.is_object() && j.contains(key), "the training config has no '", where, key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    NMS_THROW("the training config's '", where, key, "' is malformed: ", j.at(key).dump());
  }
}

}  // namespace

TrainOptions train_options_from_config(std::string_view config_json) {
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::exception& e) {
    NMS_THROW("the training config is not valid JSON: ", e.what());
  }
  NMS_CHECK(j.is_object() && j.contains("model"), "the training config has no 'model'");
  TrainOptions o;
  const json& m = j.at("model");
  const auto kind_name = field<std::string>(m, "kind", "model.");
  const auto kind = model_kind_from_name(kind_name);
  NMS_CHECK(kind.has_value(), "the training config's model.kind '", kind_name, "' is unknown");
  o.model.kind = *kind;
  if (*kind == ModelKind::kMlp) {
    o.model.mlp_hidden = field<std::vector<int64_t>>(m, "hidden", "model.");
  } else {
    o.model.width = field<int64_t>(m, "width", "model.");
    o.model.blocks = field<int64_t>(m, "blocks", "model.");
    o.model.heads = field<int64_t>(m, "heads", "model.");
    o.model.mlp_ratio = field<int64_t>(m, "mlp_ratio", "model.");
    if (*kind == ModelKind::kVit) o.model.vit_patch = field<int64_t>(m, "patch", "model.");
    if (*kind == ModelKind::kCharLm) {
      o.model.context = field<int64_t>(m, "context", "model.");
      o.model.vocab = field<int64_t>(m, "vocab", "model.");
    }
  }
  NMS_CHECK(j.contains("recipe"), "the training config has no 'recipe'");
  o.recipe = parse_recipe(j.at("recipe").dump(), "the training config's recipe");
  o.epochs = field<int64_t>(j, "epochs", "");
  o.batch = field<int64_t>(j, "batch", "");
  const auto opt_name = field<std::string>(j, "optimizer", "");
  o.optimizer = optimizer_from_name(opt_name);
  NMS_CHECK(o.optimizer.has_value(), "the training config's optimizer '", opt_name, "' is unknown");
  o.lr = field<double>(j, "lr", "");
  o.weight_decay = field<double>(j, "weight_decay", "");
  o.warmup_steps = field<int64_t>(j, "warmup_steps", "");
  o.seed = field<uint64_t>(j, "seed", "");
  o.normalize = field<bool>(j, "normalize", "");
  o.limit_train = field<int64_t>(j, "limit_train", "");
  o.limit_test = field<int64_t>(j, "limit_test", "");
  o.steps_per_epoch = field<int64_t>(j, "steps_per_epoch", "");
  if (j.contains("init")) o.init_path = field<std::string>(j, "init", "");
  return o;
}

TrainedModel load_trained_model(const fs::path& path) {
  const fs::path file = fs::is_directory(path) ? path / kCheckpointName : path;
  NMS_CHECK(fs::exists(file), file.string(), " does not exist",
            fs::is_directory(path) ? " (the directory holds no training checkpoint)" : "");
  TrainedModel t;
  t.file = file;
  const Checkpoint c = read_checkpoint(file);
  t.metadata = c.metadata;
  const auto cfg = c.metadata.find(kMetaConfig);
  NMS_CHECK(cfg != c.metadata.end(), file.string(), " is not a training checkpoint (no ",
            kMetaConfig, " metadata; `nmsparse train` writes one)");
  try {
    t.options = train_options_from_config(cfg->second);
    t.options.model.validate();
  } catch (const Error& e) {
    NMS_THROW(file.string(), ": ", e.what());
  }
  torch::manual_seed(t.options.seed);
  t.model = make_model(t.options.model);
  t.sparsify = sparsify(*t.model, t.options.recipe, t.model->head_name());
  try {
    module_parameters_from(*t.model, c);
  } catch (const Error& e) {
    NMS_THROW(file.string(), " does not fit the model of its config: ", e.what());
  }
  return t;
}

}  // namespace nms
