// SafetensorsWriter and write_safetensors: layout from safetensors_format.cpp, durability and
// atomicity from temp_file.cpp.
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "io/quote.h"
#include "io/safetensors_format.h"
#include "io/temp_file.h"
#include "nmsparse/core/error.h"
#include "nmsparse/core/half.h"
#include "nmsparse/io/safetensors.h"

namespace nms {

struct SafetensorsWriter::Impl {
  std::filesystem::path path;
  std::vector<TensorSpec> specs;
  detail::SafetensorsLayout layout;
  detail::AtomicOutput out;
  std::map<std::string, size_t, std::less<>> index;  // name -> position in specs
  std::vector<bool> written;
  size_t remaining = 0;
  bool committed = false;

  size_t lookup(std::string_view name) const {
    const auto it = index.find(name);
    if (it == index.end()) {
      throw Error(detail::concat(out.context(), ": no tensor named ", detail::quote_untrusted(name),
                                 " in the writer's specs"));
    }
    return it->second;
  }

  void check_writable(size_t i) const {
    if (committed) throw Error(detail::concat(out.context(), ": write after commit()"));
    if (written[i]) {
      throw Error(detail::concat(out.context(), ": tensor ", detail::quote_untrusted(specs[i].name),
                                 " was already written"));
    }
  }

  void mark_written(size_t i) {
    written[i] = true;
    --remaining;
  }
};

namespace {

std::string writer_context(const std::filesystem::path& path) {
  return detail::concat("SafetensorsWriter: ", path.string());
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> specs,
                                     std::map<std::string, std::string> metadata) {
  const std::string context = writer_context(path);
  detail::SafetensorsLayout layout = detail::plan_safetensors(specs, metadata, context);
  detail::AtomicOutput out = detail::AtomicOutput::create(path, context);
  out.resize(layout.file_size);
  out.write_at(0, std::as_bytes(std::span<const char>(layout.prefix)));
  impl_ = std::make_unique<Impl>(Impl{.path = std::move(path),
                                      .specs = std::move(specs),
                                      .layout = std::move(layout),
                                      .out = std::move(out),
                                      .index = {},
                                      .written = {}});
  for (size_t i = 0; i < impl_->specs.size(); ++i) impl_->index.emplace(impl_->specs[i].name, i);
  impl_->written.assign(impl_->specs.size(), false);
  impl_->remaining = impl_->specs.size();
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&&) noexcept = default;
SafetensorsWriter::~SafetensorsWriter() = default;  // AtomicOutput unlinks an uncommitted file

const std::filesystem::path& SafetensorsWriter::path() const {
  NMS_CHECK(impl_ != nullptr, "SafetensorsWriter was moved from");
  return impl_->path;
}

const std::filesystem::path& SafetensorsWriter::temp_path() const {
  NMS_CHECK(impl_ != nullptr, "SafetensorsWriter was moved from");
  return impl_->out.temp_path();
}

void SafetensorsWriter::write(std::string_view name, std::span<const std::byte> data) {
  NMS_CHECK(impl_ != nullptr, "SafetensorsWriter was moved from");
  const size_t i = impl_->lookup(name);
  impl_->check_writable(i);
  const TensorSpec& spec = impl_->specs[i];
  if (data.size() != impl_->layout.sizes[i]) {
    throw Error(detail::concat(impl_->out.context(), ": tensor ",
                               detail::quote_untrusted(spec.name), " (", dtype_name(spec.dtype),
                               " ", detail::format_shape(spec.shape), ") needs ",
                               impl_->layout.sizes[i], " bytes, got ", data.size()));
  }
  impl_->out.write_at(impl_->layout.offsets[i], data);
  impl_->mark_written(i);
}

void SafetensorsWriter::write_f32(std::string_view name, std::span<const float> values) {
  NMS_CHECK(impl_ != nullptr, "SafetensorsWriter was moved from");
  const size_t i = impl_->lookup(name);
  impl_->check_writable(i);
  const TensorSpec& spec = impl_->specs[i];
  if (!dtype_is_float(spec.dtype)) {
    throw Error(detail::concat(impl_->out.context(), ": tensor ",
                               detail::quote_untrusted(spec.name), " has dtype ",
                               dtype_name(spec.dtype), "; write_f32 needs F64/F32/F16/BF16"));
  }
  const size_t element_size = static_cast<size_t>(dtype_size(spec.dtype));
  const uint64_t numel = impl_->layout.sizes[i] / element_size;
  if (values.size() != numel) {
    throw Error(detail::concat(impl_->out.context(), ": tensor ",
                               detail::quote_untrusted(spec.name), " ",
                               detail::format_shape(spec.shape), " has ", numel, " elements, got ",
                               values.size(), " values"));
  }
  // Convert in chunks so memory stays bounded whatever the tensor size.
  constexpr size_t kChunk = 16384;
  std::vector<std::byte> buffer(std::min<size_t>(kChunk, values.size()) * element_size);
  uint64_t offset = impl_->layout.offsets[i];
  for (size_t begin = 0; begin < values.size(); begin += kChunk) {
    const size_t count = std::min(kChunk, values.size() - begin);
    std::byte* dst = buffer.data();
    for (size_t k = 0; k < count; ++k) {
      const float v = values[begin + k];
      switch (spec.dtype) {
        case DType::kF32:
          std::memcpy(dst + 4 * k, &v, 4);
          break;
        case DType::kF16: {
          const uint16_t bits = f32_to_f16(v);
          std::memcpy(dst + 2 * k, &bits, 2);
          break;
        }
        case DType::kBF16: {
          const uint16_t bits = f32_to_bf16(v);
          std::memcpy(dst + 2 * k, &bits, 2);
          break;
        }
        case DType::kF64: {
          const double d = v;
          std::memcpy(dst + 8 * k, &d, 8);
          break;
        }
        default:
          NMS_ASSERT(false, "unreachable: non-float dtype passed the check");
      }
    }
    impl_->out.write_at(offset, std::span<const std::byte>(dst, count * element_size));
    offset += count * element_size;
  }
  impl_->mark_written(i);
}

void SafetensorsWriter::commit() {
  NMS_CHECK(impl_ != nullptr, "SafetensorsWriter was moved from");
  if (impl_->committed)
    throw Error(detail::concat(impl_->out.context(), ": commit() called twice"));
  if (impl_->remaining > 0) {
    std::string missing;
    size_t listed = 0;
    for (size_t i = 0; i < impl_->specs.size() && listed < 5; ++i) {
      if (!impl_->written[i]) {
        missing += (listed++ ? ", " : "") + detail::quote_untrusted(impl_->specs[i].name);
      }
    }
    if (impl_->remaining > listed) missing += ", ...";
    throw Error(detail::concat(impl_->out.context(), ": commit() with ", impl_->remaining,
                               " tensor(s) not written: ", missing));
  }
  impl_->out.commit();
  impl_->committed = true;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorData& t : tensors) specs.push_back(t.spec);
  SafetensorsWriter writer(path, std::move(specs), metadata);
  for (const TensorData& t : tensors) writer.write(t.spec.name, t.bytes);
  writer.commit();
}

}  // namespace nms
