#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "base/numa.h"

namespace cs {
namespace {

// Large blocks are mappings of their own (not the heap's): a hint given to
// one (huge pages, --numa's policy) then covers that block alone, where on
// the heap it would cover whatever the heap grows into after it. Under
// AddressSanitizer they come from its allocator instead, which checks their
// bounds (and maps large blocks on their own too).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kOwnMappings = false;
#else
constexpr bool kOwnMappings = true;
#endif

// The own mappings' sizes, for munmap.
std::mutex g_mutex;
std::map<uintptr_t, size_t>& own_mappings() {
  static std::map<uintptr_t, size_t> blocks;
  return blocks;
}

// `bytes` (a multiple of kHugePage) mapped with a huge page to spare, then
// trimmed to a 2 MB boundary; null when the kernel has no room.
void* map_aligned(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t p = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (p > start) munmap(raw, p - start);
  if (start + span > p + bytes) munmap(reinterpret_cast<void*>(p + bytes), start + span - (p + bytes));
  return reinterpret_cast<void*>(p);
}

}  // namespace

void* allocate_hinted(size_t bytes) {
  if (bytes < kHugePage) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = kOwnMappings ? map_aligned(rounded) : std::aligned_alloc(kHugePage, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
  // Pages spread over the NUMA nodes where --numa asks (base/numa.h).
  apply_numa_policy(p, rounded);
  if (kOwnMappings) {
    std::lock_guard lock(g_mutex);
    own_mappings()[reinterpret_cast<uintptr_t>(p)] = rounded;
  }
  return p;
}

void free_hinted(void* p) noexcept {
  if (!p) return;
  if (kOwnMappings) {
    std::lock_guard lock(g_mutex);
    auto& blocks = own_mappings();
    if (const auto it = blocks.find(reinterpret_cast<uintptr_t>(p)); it != blocks.end()) {
      munmap(p, it->second);
      blocks.erase(it);
      return;
    }
  }
  std::free(p);
}

}  // namespace cs
