#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace cs {

void* allocate_hinted(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded ? rounded : align);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
  return p;
}

void free_hinted(void* p) noexcept { std::free(p); }

}  // namespace cs
