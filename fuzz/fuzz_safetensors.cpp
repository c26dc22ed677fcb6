// libFuzzer target for the safetensors reader: any byte string must either be refused with
// nms::Error or yield a file whose every tensor can be read without touching memory outside the
// buffer. Anything else (a crash, a sanitizer report, another exception type, a hang) is a bug.
//
// Build and run: scripts/fuzz.sh SECONDS (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "nmsparse/core/error.h"
#include "nmsparse/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nms::SafetensorsFile file =
        nms::SafetensorsFile::from_bytes(std::span<const uint8_t>(data, size), "fuzz-input");
    volatile uint8_t sink = 0;
    for (const nms::TensorInfo& info : file.tensors()) {
      const std::span<const std::byte> raw = file.raw(info);
      for (const std::byte b : raw) sink = sink ^ static_cast<uint8_t>(b);
      if (nms::dtype_is_float(info.dtype)) {
        const std::vector<float> values = file.read_f32(info);
        if (values.size() != static_cast<size_t>(info.numel)) __builtin_trap();
      }
      if (file.find(info.name) != &info) __builtin_trap();
    }
    for (const auto& [key, value] : file.metadata())
      sink = sink ^ static_cast<uint8_t>(key.size() + value.size());
  } catch (const nms::Error&) {
    // Refused: the expected outcome for almost every input.
  }
  return 0;
}
