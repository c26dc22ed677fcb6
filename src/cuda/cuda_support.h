// PRIVATE header of the CUDA backend: error checks, device buffers and event timers (host code,
// included by the .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "nmsparse/core/error.h"

// Throws nms::Error naming the call and CUDA's message when `expr` does not return cudaSuccess.
#define NMS_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    const cudaError_t nms_cuda_status_ = (expr);                                                 \
    if (nms_cuda_status_ != cudaSuccess) [[unlikely]] {                                          \
      ::nms::detail::throw_error(                                                                \
          __func__, ::nms::detail::concat(#expr, ": ", cudaGetErrorName(nms_cuda_status_), " (", \
                                          cudaGetErrorString(nms_cuda_status_), ")"));           \
    }                                                                                            \
  } while (0)

namespace nms::cuda::detail {

// Throws unless device 0 is usable (device_available's reason in the message).
void require_device(const char* caller);

// Owning device allocation of `count` T's (uninitialised); move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) NMS_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  T* get() const { return data_; }
  size_t size() const { return count_; }
  void upload(const T* host, size_t count) {
    NMS_CUDA_CHECK(cudaMemcpy(data_, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, size_t count) const {
    NMS_CUDA_CHECK(cudaMemcpy(host, data_, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  void zero() {
    if (count_ > 0) NMS_CUDA_CHECK(cudaMemset(data_, 0, count_ * sizeof(T)));
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// Device time between start() and stop() (CUDA events on the default stream).
class EventTimer {
 public:
  EventTimer() {
    NMS_CUDA_CHECK(cudaEventCreate(&start_));
    NMS_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() { NMS_CUDA_CHECK(cudaEventRecord(start_)); }
  // Waits for the work since start() and returns its device time in ms.
  double stop() {
    NMS_CUDA_CHECK(cudaEventRecord(stop_));
    NMS_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    NMS_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{};
  cudaEvent_t stop_{};
};

// Checks the launch and waits for the kernels, turning a device fault into nms::Error.
inline void sync_checked(const char* what) {
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t done = launch == cudaSuccess ? cudaDeviceSynchronize() : launch;
  NMS_CHECK(done == cudaSuccess, what, ": ", cudaGetErrorName(done), " (", cudaGetErrorString(done),
            ")");
}

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// Blocks of `threads` covering `count` work items.
inline unsigned blocks_for(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace nms::cuda::detail
