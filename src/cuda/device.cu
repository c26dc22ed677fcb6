// Device discovery for the CUDA backend.
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_support.h"
#include "nmsparse/cuda/cuda.h"

namespace nms::cuda {
namespace {

std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = status != cudaSuccess
                 ? std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(status) +
                       " (" + cudaGetErrorString(status) + ")"
                 : std::string("no CUDA device: cudaGetDeviceCount found 0 devices");
    }
    cudaGetLastError();  // clear the sticky error of the failed query
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  detail::require_device("device_info");
  cudaDeviceProp prop{};
  NMS_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  DeviceInfo info;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  int clock_khz = 0;
  int bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess) {
    // Double data rate: two transfers per clock.
    info.peak_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  }
  cudaGetLastError();
  int runtime = 0;
  int driver = 0;
  NMS_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  NMS_CUDA_CHECK(cudaDriverGetVersion(&driver));
  info.runtime_version = version_string(runtime);
  info.driver_version = version_string(driver);
  return info;
}

namespace detail {

void require_device(const char* caller) {
  std::string why;
  if (!device_available(&why)) {
    ::nms::detail::throw_error(caller, why +
                                           " (the CUDA backend needs an NVIDIA GPU; the CPU "
                                           "functions of the same name without _gpu do the "
                                           "same work)");
  }
}

}  // namespace detail
}  // namespace nms::cuda
