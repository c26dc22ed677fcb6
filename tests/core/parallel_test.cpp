#include "core/parallel.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "nmsparse/core/error.h"
#include "nmsparse/core/threading.h"

namespace nms {
namespace {

TEST(ParallelFor, VisitsEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ScopedNumThreads scope(threads);
    std::vector<int> hits(1000, 0);
    detail::parallel_for(1000, [&](int64_t i) { hits[i] += 1; });
    for (int h : hits) ASSERT_EQ(h, 1);
  }
}

TEST(ParallelFor, RethrowsExceptionFromInsideRegion) {
  ScopedNumThreads scope(2);
  EXPECT_THROW(detail::parallel_for(100,
                                    [&](int64_t i) {
                                      if (i == 57) NMS_THROW("bad index ", i);
                                    }),
               Error);
  try {
    detail::parallel_for(10, [&](int64_t i) {
      if (i >= 3) throw std::out_of_range("out " + std::to_string(i));
    });
    FAIL();
  } catch (const std::out_of_range&) {
  }
}

TEST(Threading, RejectsZeroThreads) {
  EXPECT_THROW(set_num_threads(0), Error);
  const int before = max_threads();
  {
    ScopedNumThreads scope(1);
    EXPECT_EQ(max_threads(), 1);
  }
  EXPECT_EQ(max_threads(), before);
}

}  // namespace
}  // namespace nms
