// SparseLinear: names, config validation, the module's parameters and buffers. The autograd
// function (the three GEMMs and the mask updates) is in sparse_linear_function.cpp.
#include "nmsparse/torch/sparse_linear.h"

#include <array>
#include <cmath>
#include <sstream>

#include "nmsparse/core/error.h"
#include "nmsparse/kernels/nm_gemm_bf16.h"
#include "torch/sparse_linear_internal.h"

namespace nms {
namespace {

template <class E, size_t N>
std::optional<E> from_name(std::string_view name, const std::array<std::string_view, N>& names) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

constexpr std::array<std::string_view, 4> kWeightModeNames{"dense", "nm", "transposable", "bimask"};
constexpr std::array<std::string_view, 4> kGradModeNames{"dense", "mvue", "mvue-approx24", "topn"};
constexpr std::array<std::string_view, 2> kExecPathNames{"reference", "kernels"};
constexpr std::array<std::string_view, 2> kGemmInputsNames{"fp32", "bf16"};

}  // namespace

std::string_view weight_mode_name(WeightMode mode) {
  return kWeightModeNames[static_cast<size_t>(mode)];
}
std::optional<WeightMode> weight_mode_from_name(std::string_view name) {
  return from_name<WeightMode>(name, kWeightModeNames);
}
std::string_view grad_mode_name(GradMode mode) {
  return kGradModeNames[static_cast<size_t>(mode)];
}
std::optional<GradMode> grad_mode_from_name(std::string_view name) {
  return from_name<GradMode>(name, kGradModeNames);
}
std::string_view exec_path_name(ExecPath path) {
  return kExecPathNames[static_cast<size_t>(path)];
}
std::optional<ExecPath> exec_path_from_name(std::string_view name) {
  return from_name<ExecPath>(name, kExecPathNames);
}

std::string_view gemm_inputs_name(GemmInputs inputs) {
  return kGemmInputsNames[static_cast<size_t>(inputs)];
}
std::optional<GemmInputs> gemm_inputs_from_name(std::string_view name) {
  return from_name<GemmInputs>(name, kGemmInputsNames);
}

void SparseLinearConfig::validate() const {
  pattern.validate();
  grad_pattern.validate();
  NMS_CHECK(std::isfinite(decay) && decay >= 0.0f, "decay (", decay,
            ") must be a finite number >= 0");
  NMS_CHECK(refresh_every >= 1, "refresh_every (", refresh_every, ") must be >= 1");
  NMS_CHECK(bimask_every >= 1, "bimask_every (", bimask_every, ") must be >= 1");
  NMS_CHECK(bimask_candidates >= 0 && bimask_candidates <= 1'000'000, "bimask_candidates (",
            bimask_candidates, ") must be in [0, 1000000]");
  NMS_CHECK(grads != GradMode::kMvueApprox24 || grad_pattern == NmPattern::make(2, 4),
            "grads mvue-approx24 needs the gradient pattern 2:4, not ", grad_pattern.to_string());
  if (inputs == GemmInputs::kBf16 && (weights != WeightMode::kDense || grads != GradMode::kDense)) {
    NMS_CHECK(weights == WeightMode::kDense || nm_gemm_bf16_supports(pattern),
              "bf16 inputs need a pattern whose m divides 32, not ", pattern.to_string());
    NMS_CHECK(grads == GradMode::kDense || nm_gemm_bf16_supports(grad_pattern),
              "bf16 inputs need a gradient pattern whose m divides 32, not ",
              grad_pattern.to_string());
    NMS_CHECK(path == ExecPath::kReference || nm_gemm_bf16_kernel_active(),
              "bf16 inputs on the kernel path need a CPU with AVX512_BF16 (and NMSPARSE_ISA at "
              "avx512); use fp32 inputs or the reference path");
  }
}

std::string SparseLinearConfig::describe() const {
  std::ostringstream os;
  os << weight_mode_name(weights);
  if (weights != WeightMode::kDense) os << ' ' << pattern.to_string();
  if (weights == WeightMode::kTransposable) {
    os << " (" << transposable_solver_name(solver) << ", every " << refresh_every << ")";
  }
  os << " / " << grad_mode_name(grads);
  if (grads != GradMode::kDense) os << ' ' << grad_pattern.to_string();
  os << " / " << exec_path_name(path);
  if (inputs == GemmInputs::kBf16) os << " / bf16 inputs";
  return os.str();
}

std::string sparse_linear_unsupported_reason(int64_t in, int64_t out,
                                             const SparseLinearConfig& config) {
  if (config.weights == WeightMode::kDense) return {};
  const int m = config.pattern.m;
  std::ostringstream os;
  if (in % m != 0) {
    os << "in (" << in << ") is not a multiple of m (" << m << ")";
  } else if ((config.weights == WeightMode::kTransposable ||
              config.weights == WeightMode::kBiMask) &&
             out % m != 0) {
    os << "out (" << out << ") is not a multiple of m (" << m << "), needed by "
       << weight_mode_name(config.weights);
  }
  return os.str();
}

SparseLinearImpl::SparseLinearImpl(SparseLinearOptions options) : options_(std::move(options)) {
  NMS_CHECK(options_.in_features >= 1 && options_.out_features >= 1, "in (", options_.in_features,
            ") and out (", options_.out_features, ") must be >= 1");
  options_.config.validate();
  const std::string reason = sparse_linear_unsupported_reason(
      options_.in_features, options_.out_features, options_.config);
  NMS_CHECK(reason.empty(), "a [", options_.out_features, ", ", options_.in_features,
            "] layer cannot be ", options_.config.describe(), ": ", reason);
  reset();
}

void SparseLinearImpl::reset() {
  const int64_t in = options_.in_features;
  const int64_t out = options_.out_features;
  weight = register_parameter("weight", torch::empty({out, in}));
  bias = options_.bias ? register_parameter("bias", torch::empty({out}))
                       : register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  mask_fwd = register_buffer("mask_fwd", torch::ones({out, in}, torch::kUInt8));
  mask_bwd = register_buffer("mask_bwd", torch::ones({out, in}, torch::kUInt8));
  perm = register_buffer("perm", torch::arange(out, torch::kInt64));
  step = register_buffer("step", torch::zeros({}, torch::kInt64));
  mask_step = register_buffer("mask_step", torch::full({}, -1, torch::kInt64));
  reset_parameters();
}

void SparseLinearImpl::reset_parameters() {
  // torch::nn::Linear: kaiming_uniform(a = sqrt(5)) for W, U(-1/sqrt(in), 1/sqrt(in)) for b.
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options_.in_features));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

void SparseLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "nms::SparseLinear(in=" << options_.in_features << ", out=" << options_.out_features
         << ", bias=" << (options_.bias ? "true" : "false") << ", " << options_.config.describe()
         << ")";
}

void SparseLinearImpl::configure(const SparseLinearConfig& config) {
  config.validate();
  const std::string reason =
      sparse_linear_unsupported_reason(options_.in_features, options_.out_features, config);
  NMS_CHECK(reason.empty(), "a [", options_.out_features, ", ", options_.in_features,
            "] layer cannot be ", config.describe(), ": ", reason);
  options_.config = config;
  mask_step.fill_(-1);
}

torch::Tensor SparseLinearImpl::effective_weight() const {
  torch::NoGradGuard no_grad;
  if (options_.config.weights == WeightMode::kDense) return weight.detach().clone();
  return weight.detach() * mask_fwd.to(weight.dtype());
}

torch::Tensor SparseLinearImpl::backward_weight() const {
  torch::NoGradGuard no_grad;
  if (options_.config.weights == WeightMode::kDense) return weight.detach().clone();
  return weight.detach() * mask_bwd.to(weight.dtype());
}

double SparseLinearImpl::backward_retained() const {
  const double fwd = mask_fwd.sum().item<double>();
  return fwd == 0 ? 1.0 : mask_bwd.sum().item<double>() / fwd;
}

torch::Tensor SparseLinearImpl::forward(const torch::Tensor& x) {
  NMS_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features, "input's last dimension (",
            x.dim() >= 1 ? x.size(-1) : 0, ") must be in_features (", options_.in_features, ")");
  if (input_observer_) {
    torch::NoGradGuard no_grad;
    input_observer_(x.detach().reshape({-1, options_.in_features}).to(torch::kFloat).contiguous());
  }
  return sparse_linear_apply(*this, x);
}

}  // namespace nms
