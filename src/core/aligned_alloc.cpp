#include <cstdlib>
#include <cstring>
#include <new>

#include "nmsparse/core/aligned_buffer.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace nms::detail {

void* aligned_alloc_bytes(size_t bytes, bool zeroed) {
  if (bytes == 0) return nullptr;
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t alignment = bytes >= kHugePage ? kHugePage : kBufferAlignment;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef __linux__
  if (alignment == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only; errors ignored
#endif
  if (zeroed) std::memset(p, 0, rounded);
  return p;
}

}  // namespace nms::detail
