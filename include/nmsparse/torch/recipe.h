// Recipes: which SparseLinear layers of a model become sparse, and how. A recipe is JSON:
//   {"weights": "bimask", "grads": "mvue", "nm": "2:4", "grad_nm": "2:4", "path": "kernels",
//    "decay": 2e-4, "solver": "exact", "refresh_every": 40, "bimask_every": 100,
//    "bimask_candidates": 100, "seed": 0, "inputs": "fp32", "include_head": false,
//    "skip": ["layers.0"],
//    "layers": {"blocks.0.mlp.fc1": {"nm": "4:8"}}}
// Every key is optional (defaults: SparseLinearConfig's; dense weights and grads); "layers" entries
// override fields for one layer by its exact name. Unknown keys, unknown layer names in "skip" /
// "layers", and bad values are errors naming the key and value.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nmsparse/torch/sparse_linear.h"

namespace nms {

struct Recipe {
  SparseLinearConfig defaults;
  bool include_head = false;
  std::vector<std::string> skip;
  std::map<std::string, std::string> layer_overrides_json;  // name -> JSON object text
};
// Field by field; overrides compare as JSON values (not as text).
bool operator==(const Recipe& a, const Recipe& b);

Recipe parse_recipe(std::string_view json_text, std::string_view label = "<recipe>");
Recipe load_recipe(const std::filesystem::path& path);  // errors name the file
std::string recipe_to_json(const Recipe& recipe);       // pretty, round-trips through parse_recipe

struct SparsifyReport {
  std::vector<std::pair<std::string, std::string>> sparsified;  // name, config.describe()
  std::vector<std::pair<std::string, std::string>> skipped;     // name, reason
};

// Configures every SparseLinear in `model` (named by registered path) per the recipe, and gives
// each a distinct RNG stream from its name (tensor_stream_id). Skips, and lists with the reason:
// the head (unless include_head), layers in "skip", layers whose shape the pattern does not divide.
// Throws when a name in "skip"/"layers" matches no layer (listing the layers), leaving the model
// unchanged. Skipped layers keep their config; a layer the recipe leaves dense (dense weights and
// grads) is configured and listed under `skipped`.
SparsifyReport sparsify(torch::nn::Module& model, const Recipe& recipe,
                        const std::string& head_name = "head");

}  // namespace nms
