// Training checkpoints: named tensors of any dtype LibTorch and safetensors share, stored
// bit-exactly with the atomic SafetensorsWriter.
#include <cstring>

#include "nmsparse/core/error.h"
#include "nmsparse/io/safetensors.h"
#include "nmsparse/torch/train.h"

namespace nms {
namespace {

DType dtype_of(const torch::Tensor& t, const std::string& name) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return DType::kF32;
    case torch::kDouble:
      return DType::kF64;
    case torch::kHalf:
      return DType::kF16;
    case torch::kBFloat16:
      return DType::kBF16;
    case torch::kLong:
      return DType::kI64;
    case torch::kInt:
      return DType::kI32;
    case torch::kShort:
      return DType::kI16;
    case torch::kChar:
      return DType::kI8;
    case torch::kByte:
      return DType::kU8;
    case torch::kBool:
      return DType::kBool;
    default:
      break;
  }
  NMS_THROW("tensor '", name, "' has dtype ", t.scalar_type(), ", which a checkpoint cannot hold");
}

torch::ScalarType torch_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return torch::kFloat;
    case DType::kF64:
      return torch::kDouble;
    case DType::kF16:
      return torch::kHalf;
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kI64:
      return torch::kLong;
    case DType::kI32:
      return torch::kInt;
    case DType::kI16:
      return torch::kShort;
    case DType::kI8:
      return torch::kChar;
    case DType::kU8:
      return torch::kByte;
    case DType::kBool:
      return torch::kBool;
  }
  NMS_ASSERT(false, "unhandled dtype");
  return torch::kFloat;
}

std::string shape_text(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint) {
  std::vector<TensorSpec> specs;
  std::vector<torch::Tensor> data;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    NMS_CHECK(tensor.defined(), "tensor '", name, "' is undefined");
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    specs.push_back(
        {name, dtype_of(t, name), std::vector<int64_t>(t.sizes().begin(), t.sizes().end())});
    data.push_back(std::move(t));
  }
  SafetensorsWriter writer(path, specs, checkpoint.metadata);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto* bytes = static_cast<const std::byte*>(data[i].data_ptr());
    writer.write(specs[i].name, std::span<const std::byte>(bytes, data[i].nbytes()));
  }
  writer.commit();
}

Checkpoint read_checkpoint(const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  Checkpoint checkpoint;
  checkpoint.metadata = file.metadata();
  for (const TensorInfo& info : file.tensors()) {
    torch::Tensor t =
        torch::empty(info.shape, torch::TensorOptions().dtype(torch_type(info.dtype)));
    const std::span<const std::byte> raw = file.raw(info);
    NMS_CHECK(raw.size() == t.nbytes(), path.string(), ": tensor '", info.name, "' has ",
              raw.size(), " bytes, expected ", t.nbytes());
    if (!raw.empty()) std::memcpy(t.data_ptr(), raw.data(), raw.size());
    checkpoint.tensors.emplace(info.name, std::move(t));
  }
  return checkpoint;
}

void module_state_to(const torch::nn::Module& module, Checkpoint& checkpoint,
                     const std::string& prefix) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.value().defined())
      checkpoint.tensors[prefix + item.key()] = item.value().detach().clone();
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (item.value().defined())
      checkpoint.tensors[prefix + item.key()] = item.value().detach().clone();
  }
}

namespace {

void restore_tensor(const Checkpoint& checkpoint, const std::string& key, torch::Tensor& target) {
  if (!target.defined()) return;
  const auto it = checkpoint.tensors.find(key);
  NMS_CHECK(it != checkpoint.tensors.end(), "the checkpoint has no tensor '", key, "'");
  const torch::Tensor& source = it->second;
  NMS_CHECK(source.sizes() == target.sizes(), "tensor '", key, "' has shape ",
            shape_text(source.sizes()), " in the checkpoint, the model has ",
            shape_text(target.sizes()));
  NMS_CHECK(source.scalar_type() == target.scalar_type(), "tensor '", key, "' has dtype ",
            source.scalar_type(), " in the checkpoint, the model has ", target.scalar_type());
  target.copy_(source);
}

}  // namespace

void module_state_from(torch::nn::Module& module, const Checkpoint& checkpoint,
                       const std::string& prefix) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    restore_tensor(checkpoint, prefix + item.key(), item.value());
  }
  for (auto& item : module.named_buffers(/*recurse=*/true)) {
    restore_tensor(checkpoint, prefix + item.key(), item.value());
  }
}

void module_parameters_from(torch::nn::Module& module, const Checkpoint& checkpoint,
                            const std::string& prefix) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    restore_tensor(checkpoint, prefix + item.key(), item.value());
  }
}

}  // namespace nms
