// The models `nmsparse train` builds, every linear layer a SparseLinear (dense until sparsify()
// configures it):
//   mlp     784 → hidden… → 10, ReLU (default hidden 1024, 1024); input images [B, 1, 28, 28] or
//           [B, 784] in [0, 1]; output logits [B, 10].
//   vit     patch p (4 or 7) → linear patch embedding to `width`, learned position embedding, a
//           class token, `blocks` pre-norm transformer blocks (attention qkv/proj, MLP width →
//           mlp_ratio·width → width, GELU), LayerNorm, head → 10. Same input and output as mlp.
//   charlm  byte-level causal transformer: token + position embedding, `blocks` pre-norm blocks
//           with causal attention, LayerNorm, head → vocab; input int64 [B, context], output
//           logits [B, context, vocab].
// Layer names (the ones recipes and reports use) are the registered module paths, e.g.
// "layers.0", "blocks.1.attn.qkv", "head".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nms {

enum class ModelKind { kMlp, kVit, kCharLm };

struct ModelConfig {
  ModelKind kind = ModelKind::kMlp;
  std::vector<int64_t> mlp_hidden{1024, 1024};
  int64_t vit_patch = 4;
  int64_t width = 192;  // vit and charlm embedding width
  int64_t blocks = 4;
  int64_t heads = 3;
  int64_t mlp_ratio = 4;
  int64_t context = 128;  // charlm sequence length
  int64_t vocab = 0;      // charlm: set from the corpus

  void validate() const;  // throws nms::Error naming the offending field
};

// "mlp" | "vit" | "charlm".
std::string_view model_kind_name(ModelKind kind);
std::optional<ModelKind> model_kind_from_name(std::string_view name);

class TrainableModel : public torch::nn::Module {
 public:
  // Logits: [B, classes] (mlp, vit) or [B, context, vocab] (charlm).
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  // Mean cross-entropy of the logits against int64 targets ([B] or [B, context]).
  torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets) const;
  // The name of the classification / vocabulary head (skipped by sparsify unless asked).
  virtual std::string head_name() const { return "head"; }
};

// Deterministic for a given torch::manual_seed.
std::shared_ptr<TrainableModel> make_model(const ModelConfig& config);

}  // namespace nms
