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

// For programs that mix nmsparse's OpenMP regions with OpenBLAS (pthreads) and LibTorch's OpenMP
// regions on several threads: re-executes the program once (execv of /proc/self/exe with the
// same argv) with OPENBLAS_THREAD_TIMEOUT=4 and GOMP_SPINCOUNT=10000 set where the user set
// neither (nor OMP_WAIT_POLICY), marked by NMSPARSE_RUNTIME_ENV=1; returns when no re-execution is
// needed, when NMSPARSE_RUNTIME_ENV is already set (set it to anything to opt out), or when exec
// fails. Both runtimes read these variables only when they load. With their defaults, OpenBLAS's
// workers spin about 100 ms after each call and libgomp's threads spin after each region, each
// taking the other's cores: a dense vision-transformer step on 2 threads took 886 ms by default
// and 506-607 ms with these settings (`bench_train_step --model vit --threads 2`, Zen 4).
void reexec_with_thread_runtime_env(char** argv);

}  // namespace nms
