// The models of `nmsparse train` (models.h): mlp, vit, charlm, every linear layer a SparseLinear.
//
// Every SparseLinear gets its input as a contiguous [..., in] tensor whose leading dimensions are
// (batch, tokens), so the layer's flattened token count is B·tokens: the token axis that the
// gradient pruning groups along, and the long GEMM dimension.
#include "nmsparse/torch/models.h"

#include <array>
#include <sstream>

#include "nmsparse/core/error.h"
#include "nmsparse/torch/attention.h"
#include "nmsparse/torch/sparse_linear.h"

namespace nms {
namespace {

constexpr int64_t kImageSide = 28;
constexpr int64_t kImagePixels = kImageSide * kImageSide;
constexpr int64_t kClasses = 10;
constexpr std::array<std::string_view, 3> kModelKindNames{"mlp", "vit", "charlm"};

std::string shape_string(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

// [B, 1, 28, 28] or [B, 784] float -> [B, 784] (a view where possible).
torch::Tensor flatten_images(const torch::Tensor& input, std::string_view model) {
  NMS_CHECK(input.is_floating_point(), model, ": input must be a float tensor, not ",
            input.scalar_type());
  const bool image = input.dim() == 4 && input.size(1) == 1 && input.size(2) == kImageSide &&
                     input.size(3) == kImageSide;
  const bool flat = input.dim() == 2 && input.size(1) == kImagePixels;
  NMS_CHECK(image || flat, model, ": input must be [B, 1, 28, 28] or [B, 784], not ",
            shape_string(input));
  return input.reshape({input.size(0), kImagePixels});
}

// Learned embedding parameter, ViT/GPT-2 initialisation N(0, 0.02²).
torch::Tensor embedding_init(std::initializer_list<int64_t> shape) {
  return torch::randn(shape) * 0.02;
}

// Multi-head self-attention: qkv (width -> 3·width), softmax(q kᵀ / √d) v per head, proj.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t width, int64_t heads, bool causal) : heads_(heads), causal_(causal) {
    qkv = register_module("qkv", SparseLinear(width, 3 * width));
    proj = register_module("proj", SparseLinear(width, width));
  }

  // x [B, T, width] -> [B, T, width].
  torch::Tensor forward(const torch::Tensor& x) {
    return proj->forward(multi_head_attention(qkv->forward(x), heads_, causal_));
  }

  SparseLinear qkv{nullptr};
  SparseLinear proj{nullptr};

 private:
  int64_t heads_;
  bool causal_;
};
TORCH_MODULE(Attention);

// width -> ratio·width, GELU, -> width.
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t width, int64_t ratio) {
    fc1 = register_module("fc1", SparseLinear(width, ratio * width));
    fc2 = register_module("fc2", SparseLinear(ratio * width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(torch::gelu(fc1->forward(x)));
  }

  SparseLinear fc1{nullptr};
  SparseLinear fc2{nullptr};
};
TORCH_MODULE(FeedForward);

// Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x)).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config, bool causal) {
    const std::vector<int64_t> shape{config.width};
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions(shape)));
    attn = register_module("attn", Attention(config.width, config.heads, causal));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions(shape)));
    mlp = register_module("mlp", FeedForward(config.width, config.mlp_ratio));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(norm1->forward(x));
    return x + mlp->forward(norm2->forward(x));
  }

  torch::nn::LayerNorm norm1{nullptr};
  Attention attn{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  FeedForward mlp{nullptr};
};
TORCH_MODULE(Block);

class MlpModel : public TrainableModel {
 public:
  explicit MlpModel(const ModelConfig& config) {
    layers = register_module("layers", torch::nn::ModuleList());
    int64_t in = kImagePixels;
    for (const int64_t hidden : config.mlp_hidden) {
      layers->push_back(SparseLinear(in, hidden));
      in = hidden;
    }
    head = register_module("head", SparseLinear(in, kClasses));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    auto x = flatten_images(input, "mlp");
    for (const auto& layer : *layers) x = torch::relu(layer->as<SparseLinearImpl>()->forward(x));
    return head->forward(x);
  }

  torch::nn::ModuleList layers{nullptr};
  SparseLinear head{nullptr};
};

class VitModel : public TrainableModel {
 public:
  explicit VitModel(const ModelConfig& config) : patch_(config.vit_patch) {
    const int64_t grid = kImageSide / patch_;
    patch_embed = register_module("patch_embed", SparseLinear(patch_ * patch_, config.width));
    cls_token = register_parameter("cls_token", embedding_init({1, 1, config.width}));
    pos_embed = register_parameter("pos_embed", embedding_init({1, grid * grid + 1, config.width}));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < config.blocks; ++i) blocks->push_back(Block(config, /*causal=*/false));
    norm = register_module(
        "norm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions(std::vector<int64_t>{config.width})));
    head = register_module("head", SparseLinear(config.width, kClasses));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    auto flat = flatten_images(input, "vit");
    const int64_t b = flat.size(0);
    const int64_t grid = kImageSide / patch_;
    // [B, 784] -> [B, gy, py, gx, px] -> [B, gy, gx, py, px] -> [B, patches, p·p]
    auto patches = flat.view({b, grid, patch_, grid, patch_})
                       .permute({0, 1, 3, 2, 4})
                       .reshape({b, grid * grid, patch_ * patch_});
    auto x = patch_embed->forward(patches);  // [B, patches, width]
    x = torch::cat({cls_token.expand({b, 1, x.size(2)}), x}, 1) + pos_embed;
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    // Only the class token reaches the head.
    auto cls = norm->forward(x.select(1, 0));  // [B, width]
    return head->forward(cls);
  }

  torch::Tensor cls_token;
  torch::Tensor pos_embed;
  SparseLinear patch_embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  SparseLinear head{nullptr};

 private:
  int64_t patch_;
};

class CharLmModel : public TrainableModel {
 public:
  explicit CharLmModel(const ModelConfig& config) : context_(config.context), vocab_(config.vocab) {
    token_embed = register_module("token_embed", torch::nn::Embedding(torch::nn::EmbeddingOptions(
                                                     config.vocab, config.width)));
    {
      torch::NoGradGuard no_grad;
      token_embed->weight.normal_(0.0, 0.02);
    }
    pos_embed = register_parameter("pos_embed", embedding_init({1, config.context, config.width}));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < config.blocks; ++i) blocks->push_back(Block(config, /*causal=*/true));
    norm = register_module(
        "norm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions(std::vector<int64_t>{config.width})));
    head = register_module("head", SparseLinear(config.width, config.vocab));
  }

  torch::Tensor forward(const torch::Tensor& input) override {
    NMS_CHECK(input.scalar_type() == torch::kInt64, "charlm: input must be int64 tokens, not ",
              input.scalar_type());
    NMS_CHECK(input.dim() == 2 && input.size(1) >= 1 && input.size(1) <= context_,
              "charlm: input must be [B, T] with 1 <= T <= context (", context_, "), not ",
              shape_string(input));
    if (input.numel() > 0) {
      const int64_t lo = input.min().item<int64_t>();
      const int64_t hi = input.max().item<int64_t>();
      NMS_CHECK(lo >= 0 && hi < vocab_, "charlm: token ids must be in [0, vocab (", vocab_,
                ")), got [", lo, ", ", hi, "]");
    }
    const int64_t t = input.size(1);
    auto x = token_embed->forward(input) + pos_embed.narrow(1, 0, t);  // [B, T, width]
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    return head->forward(norm->forward(x));  // [B, T, vocab]
  }

  torch::nn::Embedding token_embed{nullptr};
  torch::Tensor pos_embed;
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  SparseLinear head{nullptr};

 private:
  int64_t context_;
  int64_t vocab_;
};

}  // namespace

std::string_view model_kind_name(ModelKind kind) {
  return kModelKindNames[static_cast<size_t>(kind)];
}

std::optional<ModelKind> model_kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kModelKindNames.size(); ++i) {
    if (kModelKindNames[i] == name) return static_cast<ModelKind>(i);
  }
  return std::nullopt;
}

void ModelConfig::validate() const {
  switch (kind) {
    case ModelKind::kMlp:
      for (size_t i = 0; i < mlp_hidden.size(); ++i) {
        NMS_CHECK(mlp_hidden[i] >= 1, "mlp_hidden[", i, "] (", mlp_hidden[i], ") must be >= 1");
      }
      return;
    case ModelKind::kVit:
      NMS_CHECK(vit_patch >= 1 && kImageSide % vit_patch == 0, "vit_patch (", vit_patch,
                ") must divide the image side (", kImageSide, "), e.g. 4 or 7");
      break;
    case ModelKind::kCharLm:
      NMS_CHECK(context >= 1, "context (", context, ") must be >= 1");
      NMS_CHECK(vocab >= 2, "vocab (", vocab, ") must be >= 2 (set it from the corpus)");
      break;
    default:
      NMS_THROW("kind (", static_cast<int>(kind), ") is not a model kind");
  }
  NMS_CHECK(width >= 1, "width (", width, ") must be >= 1");
  NMS_CHECK(heads >= 1, "heads (", heads, ") must be >= 1");
  NMS_CHECK(width % heads == 0, "width (", width, ") must be a multiple of heads (", heads, ")");
  NMS_CHECK(blocks >= 1, "blocks (", blocks, ") must be >= 1");
  NMS_CHECK(mlp_ratio >= 1, "mlp_ratio (", mlp_ratio, ") must be >= 1");
}

torch::Tensor TrainableModel::loss(const torch::Tensor& logits,
                                   const torch::Tensor& targets) const {
  NMS_CHECK(targets.scalar_type() == torch::kInt64, "targets must be int64, not ",
            targets.scalar_type());
  NMS_CHECK(logits.dim() == targets.dim() + 1 &&
                logits.sizes().slice(0, targets.dim()) == targets.sizes(),
            "logits ", shape_string(logits), " do not match targets ", shape_string(targets),
            " (expected logits [targets..., classes])");
  const int64_t classes = logits.size(-1);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, classes}), targets.reshape({-1}));
}

std::shared_ptr<TrainableModel> make_model(const ModelConfig& config) {
  config.validate();
  switch (config.kind) {
    case ModelKind::kMlp:
      return std::make_shared<MlpModel>(config);
    case ModelKind::kVit:
      return std::make_shared<VitModel>(config);
    case ModelKind::kCharLm:
      return std::make_shared<CharLmModel>(config);
  }
  NMS_THROW("kind (", static_cast<int>(config.kind), ") is not a model kind");
}

}  // namespace nms
