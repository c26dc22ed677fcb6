#include "nmsparse/core/half.h"

#include <cstddef>

#include "nmsparse/core/error.h"

namespace nms {

void f16_to_f32(std::span<const uint16_t> src, std::span<float> dst) {
  NMS_CHECK(src.size() == dst.size(), "src has ", src.size(), " elements but dst has ", dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16(std::span<const float> src, std::span<uint16_t> dst) {
  NMS_CHECK(src.size() == dst.size(), "src has ", src.size(), " elements but dst has ", dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = f32_to_f16(src[i]);
}

void bf16_to_f32(std::span<const uint16_t> src, std::span<float> dst) {
  NMS_CHECK(src.size() == dst.size(), "src has ", src.size(), " elements but dst has ", dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16(std::span<const float> src, std::span<uint16_t> dst) {
  NMS_CHECK(src.size() == dst.size(), "src has ", src.size(), " elements but dst has ", dst.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace nms
