#include "nmsparse/core/threading.h"

#include "nmsparse/core/error.h"

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

}  // namespace nms
