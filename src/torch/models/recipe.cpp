// Recipes (recipe.h): strict JSON parsing, canonical printing, and sparsify().
#include "nmsparse/torch/recipe.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "nmsparse/core/error.h"
#include "nmsparse/grad/prune.h"

namespace nms {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::array<std::string_view, 12> kConfigKeys{
    "weights", "grads",         "nm",           "grad_nm",           "path", "decay",
    "solver",  "refresh_every", "bimask_every", "bimask_candidates", "seed", "inputs"};
constexpr std::array<std::string_view, 3> kRecipeKeys{"include_head", "skip", "layers"};

template <size_t N>
std::string join(const std::array<std::string_view, N>& names, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += sep;
    out += names[i];
  }
  return out;
}

// Every parse error names the function the user called, the recipe and the key.
template <class... Args>
[[noreturn]] void fail(std::string_view func, const std::string& where, Args&&... args) {
  detail::throw_error(std::string(func).c_str(),
                      detail::concat(where, ": ", std::forward<Args>(args)...));
}

std::string where_of(std::string_view label, std::string_view key) {
  return detail::concat(label, ": \"", key, "\"");
}

// An enum from its name; `count` values, named by `name_of` (the names sparse_linear.h defines).
template <class E>
E parse_enum(const Json& value, std::optional<E> (*from_name)(std::string_view),
             std::string_view (*name_of)(E), int count, std::string_view label,
             std::string_view key) {
  if (!value.is_string())
    fail("parse_recipe", where_of(label, key), value.dump(), " is not a string");
  const auto text = value.get<std::string>();
  const auto parsed = from_name(text);
  if (!parsed) {
    std::string valid;
    for (int i = 0; i < count; ++i) {
      valid += (i > 0 ? "|" : "");
      valid += name_of(static_cast<E>(i));
    }
    fail("parse_recipe", where_of(label, key), "unknown value \"", text, "\" (valid: ", valid, ")");
  }
  return *parsed;
}

NmPattern parse_pattern(const Json& value, std::string_view label, std::string_view key) {
  if (!value.is_string())
    fail("parse_recipe", where_of(label, key), value.dump(), " is not a string");
  const auto text = value.get<std::string>();
  try {
    return NmPattern::parse(text);
  } catch (const Error& e) {
    fail("parse_recipe", where_of(label, key), "bad pattern \"", text, "\" (", e.what(), ")");
  }
}

int parse_int(const Json& value, std::string_view label, std::string_view key) {
  if (!value.is_number_integer()) {
    fail("parse_recipe", where_of(label, key), value.dump(), " is not an integer");
  }
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      fail("parse_recipe", where_of(label, key), value.dump(), " is out of range");
    }
    return static_cast<int>(v);
  }
  const auto v = value.get<int64_t>();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    fail("parse_recipe", where_of(label, key), value.dump(), " is out of range");
  }
  return static_cast<int>(v);
}

// Sets one SparseLinearConfig field from its key; false when `key` is not a config key.
bool apply_config_key(SparseLinearConfig& config, const std::string& key, const Json& value,
                      std::string_view label) {
  if (key == "weights") {
    config.weights = parse_enum(value, weight_mode_from_name, weight_mode_name, 4, label, key);
  } else if (key == "grads") {
    config.grads = parse_enum(value, grad_mode_from_name, grad_mode_name, 4, label, key);
  } else if (key == "nm") {
    config.pattern = parse_pattern(value, label, key);
  } else if (key == "grad_nm") {
    config.grad_pattern = parse_pattern(value, label, key);
  } else if (key == "path") {
    config.path = parse_enum(value, exec_path_from_name, exec_path_name, 2, label, key);
  } else if (key == "decay") {
    if (!value.is_number())
      fail("parse_recipe", where_of(label, key), value.dump(), " is not a number");
    config.decay = value.get<float>();
  } else if (key == "solver") {
    config.solver =
        parse_enum(value, transposable_solver_from_name, transposable_solver_name, 3, label, key);
  } else if (key == "refresh_every") {
    config.refresh_every = parse_int(value, label, key);
  } else if (key == "bimask_every") {
    config.bimask_every = parse_int(value, label, key);
  } else if (key == "bimask_candidates") {
    config.bimask_candidates = parse_int(value, label, key);
  } else if (key == "seed") {
    if (!value.is_number_unsigned()) {
      fail("parse_recipe", where_of(label, key), value.dump(), " is not an integer >= 0");
    }
    config.seed = value.get<uint64_t>();
  } else if (key == "inputs") {
    config.inputs = parse_enum(value, gemm_inputs_from_name, gemm_inputs_name, 2, label, key);
  } else {
    return false;
  }
  return true;
}

void validate_config(const SparseLinearConfig& config, std::string_view func,
                     const std::string& where) {
  try {
    config.validate();
  } catch (const Error& e) {
    fail(func, where, e.what());
  }
}

// Applies one layer's override object (JSON text) on top of `config`.
void apply_overrides(SparseLinearConfig& config, const std::string& json_text,
                     std::string_view func, const std::string& where) {
  Json overrides;
  try {
    overrides = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail(func, where, "invalid JSON (", e.what(), ")");
  }
  if (!overrides.is_object()) fail(func, where, overrides.dump(), " is not an object");
  for (const auto& [key, value] : overrides.items()) {
    if (!apply_config_key(config, key, value, where)) {
      fail(func, where, "unknown key \"", key,
           "\" (valid in a layer entry: ", join(kConfigKeys, ", "), ")");
    }
  }
  validate_config(config, func, where);
}

// A float as its shortest decimal, so 2e-4f prints 0.0002 (not 0.00019999999494757503) and reads
// back to the same float.
double float_for_json(float value) {
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::stod(std::string(buffer.data(), result.ptr));
}

OrderedJson config_to_json(const SparseLinearConfig& c) {
  OrderedJson j;
  j["weights"] = std::string(weight_mode_name(c.weights));
  j["grads"] = std::string(grad_mode_name(c.grads));
  j["nm"] = c.pattern.to_string();
  j["grad_nm"] = c.grad_pattern.to_string();
  j["path"] = std::string(exec_path_name(c.path));
  j["decay"] = float_for_json(c.decay);
  j["solver"] = std::string(transposable_solver_name(c.solver));
  j["refresh_every"] = c.refresh_every;
  j["bimask_every"] = c.bimask_every;
  j["bimask_candidates"] = c.bimask_candidates;
  j["seed"] = c.seed;
  j["inputs"] = std::string(gemm_inputs_name(c.inputs));
  return j;
}

bool same_config(const SparseLinearConfig& a, const SparseLinearConfig& b) {
  return a.weights == b.weights && a.grads == b.grads && a.pattern == b.pattern &&
         a.grad_pattern == b.grad_pattern && a.path == b.path && a.decay == b.decay &&
         a.solver == b.solver && a.refresh_every == b.refresh_every &&
         a.bimask_every == b.bimask_every && a.bimask_candidates == b.bimask_candidates &&
         a.seed == b.seed && a.inputs == b.inputs;
}

}  // namespace

bool operator==(const Recipe& a, const Recipe& b) {
  if (!same_config(a.defaults, b.defaults) || a.include_head != b.include_head ||
      a.skip != b.skip || a.layer_overrides_json.size() != b.layer_overrides_json.size()) {
    return false;
  }
  for (auto ia = a.layer_overrides_json.begin(), ib = b.layer_overrides_json.begin();
       ia != a.layer_overrides_json.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return false;
    // Compared as JSON values, so formatting does not matter.
    const auto ja = Json::parse(ia->second, nullptr, /*allow_exceptions=*/false);
    const auto jb = Json::parse(ib->second, nullptr, /*allow_exceptions=*/false);
    if (ja.is_discarded() || jb.is_discarded() ? ia->second != ib->second : ja != jb) return false;
  }
  return true;
}

Recipe parse_recipe(std::string_view json_text, std::string_view label) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& e) {
    fail("parse_recipe", std::string(label), "invalid JSON (", e.what(), ")");
  }
  if (!root.is_object())
    fail("parse_recipe", std::string(label), "the recipe must be a JSON object");

  Recipe recipe;
  const Json* layers = nullptr;
  for (const auto& [key, value] : root.items()) {
    if (apply_config_key(recipe.defaults, key, value, label)) continue;
    if (key == "include_head") {
      if (!value.is_boolean())
        fail("parse_recipe", where_of(label, key), value.dump(), " is not a boolean");
      recipe.include_head = value.get<bool>();
    } else if (key == "skip") {
      if (!value.is_array())
        fail("parse_recipe", where_of(label, key), value.dump(), " is not an array");
      for (const auto& name : value) {
        if (!name.is_string()) {
          fail("parse_recipe", where_of(label, key), name.dump(),
               " is not a layer name (a string)");
        }
        const auto text = name.get<std::string>();
        if (std::find(recipe.skip.begin(), recipe.skip.end(), text) != recipe.skip.end()) {
          fail("parse_recipe", where_of(label, key), "\"", text, "\" is listed twice");
        }
        recipe.skip.push_back(text);
      }
    } else if (key == "layers") {
      if (!value.is_object())
        fail("parse_recipe", where_of(label, key), value.dump(), " is not an object");
      layers = &value;
    } else {
      fail("parse_recipe", std::string(label), "unknown key \"", key,
           "\" (valid: ", join(kConfigKeys, ", "), ", ", join(kRecipeKeys, ", "), ")");
    }
  }
  validate_config(recipe.defaults, "parse_recipe", std::string(label));
  if (layers != nullptr) {
    for (const auto& [name, overrides] : layers->items()) {
      const std::string where = detail::concat(label, ": \"layers\".\"", name, "\"");
      const std::string text = overrides.dump();
      SparseLinearConfig merged = recipe.defaults;
      apply_overrides(merged, text, "parse_recipe", where);
      recipe.layer_overrides_json[name] = text;
    }
  }
  return recipe;
}

Recipe load_recipe(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NMS_CHECK(in, "cannot open recipe file ", path);
  std::ostringstream text;
  text << in.rdbuf();
  NMS_CHECK(!in.bad(), "cannot read recipe file ", path);
  return parse_recipe(text.str(), path.string());
}

std::string recipe_to_json(const Recipe& recipe) {
  OrderedJson j = config_to_json(recipe.defaults);
  j["include_head"] = recipe.include_head;
  j["skip"] = recipe.skip;
  OrderedJson layers = OrderedJson::object();
  for (const auto& [name, text] : recipe.layer_overrides_json) {
    OrderedJson overrides;
    try {
      overrides = OrderedJson::parse(text);
    } catch (const OrderedJson::exception& e) {
      NMS_THROW("layer_overrides_json[\"", name, "\"] is not valid JSON (", e.what(), ")");
    }
    layers[name] = std::move(overrides);
  }
  j["layers"] = std::move(layers);
  return j.dump(2);
}

SparsifyReport sparsify(torch::nn::Module& model, const Recipe& recipe,
                        const std::string& head_name) {
  // include_self = false: the root needs no name and need not be owned by a shared_ptr.
  std::vector<std::pair<std::string, SparseLinearImpl*>> layers;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (auto* layer = dynamic_cast<SparseLinearImpl*>(item.value().get())) {
      layers.emplace_back(item.key(), layer);
    }
  }
  const auto is_layer = [&](const std::string& name) {
    return std::any_of(layers.begin(), layers.end(),
                       [&](const auto& l) { return l.first == name; });
  };
  const auto layer_list = [&] {
    std::string out;
    for (const auto& [name, layer] : layers) out += (out.empty() ? "" : ", ") + name;
    return out.empty() ? std::string("none") : out;
  };
  for (const auto& name : recipe.skip) {
    NMS_CHECK(is_layer(name), "\"skip\": \"", name,
              "\" is not a SparseLinear layer of the model (layers: ", layer_list(), ")");
  }
  for (const auto& [name, text] : recipe.layer_overrides_json) {
    NMS_CHECK(is_layer(name), "\"layers\": \"", name,
              "\" is not a SparseLinear layer of the model (layers: ", layer_list(), ")");
  }

  // Plan every layer first, so that an error leaves the model unchanged.
  struct Plan {
    SparseLinearImpl* layer;
    std::string name;
    std::optional<SparseLinearConfig> config;  // nullopt: skipped
    std::string note;                          // describe() or the reason for skipping
  };
  std::vector<Plan> plans;
  for (const auto& [name, layer] : layers) {
    Plan plan{layer, name, std::nullopt, {}};
    if (name == head_name && !recipe.include_head) {
      plan.note = "the head (include_head is false)";
    } else if (std::find(recipe.skip.begin(), recipe.skip.end(), name) != recipe.skip.end()) {
      plan.note = "listed in \"skip\"";
    } else {
      SparseLinearConfig config = recipe.defaults;
      if (const auto it = recipe.layer_overrides_json.find(name);
          it != recipe.layer_overrides_json.end()) {
        apply_overrides(config, it->second, "sparsify",
                        detail::concat("\"layers\".\"", name, "\""));
      } else {
        validate_config(config, "sparsify", "the recipe's defaults");
      }
      const auto& options = layer->options();
      const std::string reason =
          sparse_linear_unsupported_reason(options.in_features, options.out_features, config);
      if (!reason.empty()) {
        plan.note = detail::concat(config.describe(), " does not fit [", options.out_features, ", ",
                                   options.in_features, "]: ", reason);
      } else {
        plan.note = config.weights == WeightMode::kDense && config.grads == GradMode::kDense
                        ? "dense weights and gradients in the recipe"
                        : config.describe();
        plan.config = config;
      }
    }
    plans.push_back(std::move(plan));
  }

  SparsifyReport report;
  for (auto& plan : plans) {
    plan.layer->set_stream(tensor_stream_id(plan.name));
    if (!plan.config) {
      report.skipped.emplace_back(plan.name, plan.note);
      continue;
    }
    plan.layer->configure(*plan.config);
    const bool dense =
        plan.config->weights == WeightMode::kDense && plan.config->grads == GradMode::kDense;
    (dense ? report.skipped : report.sparsified).emplace_back(plan.name, plan.note);
  }
  return report;
}

}  // namespace nms
