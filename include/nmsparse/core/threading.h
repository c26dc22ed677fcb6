// Thread-count control for nmsparse's OpenMP regions. Results never depend on the thread count:
// parallel work is split into independent pieces whose outputs do not overlap.
#pragma once

namespace nms {

// Threads a parallel region will use (1 when built without OpenMP).
int max_threads();
// Sets the thread count for subsequent regions (n >= 1; throws otherwise).
void set_num_threads(int n);

// Sets the thread count for a scope and restores the previous one on exit.
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n) : previous_(max_threads()) { set_num_threads(n); }
  ~ScopedNumThreads() { set_num_threads(previous_); }
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int previous_;
};

}  // namespace nms
