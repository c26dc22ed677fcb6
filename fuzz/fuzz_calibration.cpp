// libFuzzer target for calibration files (nmsparse/prune/calibration.h): any byte string must be
// refused with nms::Error or open into layers that each read into a validated LayerCalibration
// (or are refused with nms::Error). Anything else (a crash, a sanitizer report, another exception
// type, a hang) is a bug. Build and run: scripts/fuzz.sh SECONDS calibration.
#include <cstddef>
#include <cstdint>
#include <span>

#include "nmsparse/core/error.h"
#include "nmsparse/prune/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nms::CalibrationFile file =
        nms::CalibrationFile::from_bytes(std::span<const uint8_t>(data, size), "fuzz-input");
    for (const std::string& layer : file.layers()) {
      try {
        const nms::LayerCalibration c = file.read(layer);
        c.validate();  // read() validated it; a second pass must agree
        if (c.in != static_cast<int64_t>(c.act_norm.size())) __builtin_trap();
      } catch (const nms::Error&) {
      }
    }
  } catch (const nms::Error&) {
  }
  return 0;
}
