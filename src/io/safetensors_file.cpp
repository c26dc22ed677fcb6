// SafetensorsFile: ownership of the bytes (mapping or copy), lookup, and typed reads. The format
// checks live in safetensors_format.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "io/mapped_file.h"
#include "io/quote.h"
#include "io/safetensors_format.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/io/safetensors.h"

namespace nms {

struct SafetensorsFile::Storage {
  detail::ReadOnlyMapping mapping;  // open()
  std::vector<std::byte> owned;     // from_bytes()
  bool is_mapped = false;

  std::span<const std::byte> bytes() const {
    return is_mapped ? mapping.bytes() : std::span<const std::byte>(owned);
  }
};

SafetensorsFile::SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string context = detail::concat("SafetensorsFile::open: ", path.string());
  auto storage = std::make_unique<Storage>();
  storage->mapping = detail::ReadOnlyMapping::open(path, context);
  storage->is_mapped = true;
  return parse(std::move(storage), path, "SafetensorsFile::open");
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const uint8_t> bytes, std::string label) {
  auto storage = std::make_unique<Storage>();
  storage->owned.resize(bytes.size());
  if (!bytes.empty()) std::memcpy(storage->owned.data(), bytes.data(), bytes.size());
  return parse(std::move(storage), std::filesystem::path(std::move(label)),
               "SafetensorsFile::from_bytes");
}

SafetensorsFile SafetensorsFile::parse(std::unique_ptr<Storage> storage,
                                       std::filesystem::path label, const char* function) {
  const std::string context = detail::concat(function, ": ", label.string());
  detail::ParsedSafetensors parsed = detail::parse_safetensors(storage->bytes(), context);
  SafetensorsFile file;
  file.path_ = std::move(label);
  file.storage_ = std::move(storage);
  file.tensors_ = std::move(parsed.tensors);
  file.metadata_ = std::move(parsed.metadata);
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_.emplace(file.tensors_[i].name, i);
  return file;
}

uint64_t SafetensorsFile::file_size() const {
  return storage_ ? storage_->bytes().size() : 0;
}

uint64_t SafetensorsFile::header_size() const {
  const uint64_t size = file_size();
  uint64_t n = 0;
  if (size >= 8) std::memcpy(&n, storage_->bytes().data(), sizeof(n));
  return n;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    throw Error(detail::concat("SafetensorsFile::at: ", path_.string(), ": no tensor named ",
                               detail::quote_untrusted(name)));
  }
  return *info;
}

std::span<const std::byte> SafetensorsFile::raw(const TensorInfo& info) const {
  NMS_CHECK(storage_ != nullptr, "SafetensorsFile was moved from");
  const std::span<const std::byte> bytes = storage_->bytes();
  NMS_CHECK(info.data_offset <= bytes.size() && info.byte_size <= bytes.size() - info.data_offset,
            path_.string(), ": tensor ", detail::quote_untrusted(info.name), " [", info.data_offset,
            ", +", info.byte_size, ") does not lie in this file (", bytes.size(), " bytes)");
  return bytes.subspan(info.data_offset, info.byte_size);
}

void SafetensorsFile::release(const TensorInfo& info) const {
  if (storage_ == nullptr || !storage_->is_mapped) return;
  const std::span<const std::byte> r = raw(info);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(r.data());
  const uintptr_t first = (begin + page - 1) / page * page;  // whole pages inside the tensor
  const uintptr_t last = (begin + r.size()) / page * page;
  if (last > first) {
    // Advice only: the mapping stays valid and faults the pages back in from the file if read
    // again. A failure changes nothing but memory use, so it is ignored.
    madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }
}

std::vector<float> SafetensorsFile::read_f32(const TensorInfo& info) const {
  NMS_CHECK(dtype_is_float(info.dtype), path_.string(), ": tensor ",
            detail::quote_untrusted(info.name), " has dtype ", dtype_name(info.dtype),
            ", which does not convert to float");
  std::vector<float> values(static_cast<size_t>(info.numel));
  read_f32_into(info, values);
  return values;
}

void SafetensorsFile::read_f32_into(const TensorInfo& info, std::span<float> dst) const {
  NMS_CHECK(dtype_is_float(info.dtype), path_.string(), ": tensor ",
            detail::quote_untrusted(info.name), " has dtype ", dtype_name(info.dtype),
            ", which does not convert to float");
  NMS_CHECK(info.numel >= 0 && dst.size() == static_cast<uint64_t>(info.numel), path_.string(),
            ": tensor ", detail::quote_untrusted(info.name), " has ", info.numel,
            " elements but dst has ", dst.size());
  const std::span<const std::byte> src = raw(info);
  NMS_CHECK(src.size() == dst.size() * static_cast<size_t>(dtype_size(info.dtype)), path_.string(),
            ": tensor ", detail::quote_untrusted(info.name), ": byte size does not match numel");
  const std::byte* p = src.data();
  switch (info.dtype) {
    case DType::kF32:
      if (!dst.empty()) std::memcpy(dst.data(), p, src.size());
      return;
    case DType::kF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t bits = 0;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = f16_to_f32(bits);
      }
      return;
    case DType::kBF16:
      for (size_t i = 0; i < dst.size(); ++i) {
        uint16_t bits = 0;
        std::memcpy(&bits, p + 2 * i, 2);
        dst[i] = bf16_to_f32(bits);
      }
      return;
    case DType::kF64:
      for (size_t i = 0; i < dst.size(); ++i) {
        double value = 0;
        std::memcpy(&value, p + 8 * i, 8);
        dst[i] = static_cast<float>(value);
      }
      return;
    default:
      NMS_ASSERT(false, "unreachable: non-float dtype passed the check");
  }
}

}  // namespace nms
