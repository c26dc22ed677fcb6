// PRIVATE header: OpenMP helpers for nmsparse's own translation units.
//
// An exception thrown inside an OpenMP region would call std::terminate. parallel_for captures the
// first exception thrown by any iteration, lets the other threads finish their current chunk
// (remaining iterations are skipped), and rethrows it on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

namespace nms::detail {

// Calls body(i) for i in [0, n) on up to max_threads() threads with static scheduling.
// `body` must only write state owned by index i. Rethrows the first exception raised.
template <class Body>
void parallel_for(int64_t n, Body&& body) {
  std::exception_ptr first_error;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace nms::detail
