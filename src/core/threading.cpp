#include "nmsparse/core/threading.h"

#include <cstdio>
#include <cstdlib>

#include "nmsparse/core/error.h"

#if defined(__linux__)
#include <unistd.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace nms {

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void set_num_threads(int n) {
  NMS_CHECK(n >= 1, "thread count (", n, ") must be at least 1");
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

void reexec_with_thread_runtime_env(char** argv) {
#if defined(__linux__)
  if (argv == nullptr || std::getenv("NMSPARSE_RUNTIME_ENV") != nullptr) return;
  bool changed = false;
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    changed = setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0;
  }
  if (std::getenv("GOMP_SPINCOUNT") == nullptr && std::getenv("OMP_WAIT_POLICY") == nullptr) {
    changed = setenv("GOMP_SPINCOUNT", "10000", 1) == 0 || changed;
  }
  // The marker makes the re-executed program return here at once.
  if (!changed || setenv("NMSPARSE_RUNTIME_ENV", "1", 1) != 0) return;
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);  // returns only on failure: go on with the defaults
#else
  (void)argv;
#endif
}

}  // namespace nms
