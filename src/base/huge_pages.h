// Memory for large arrays that are streamed or walked at random: blocks of
// 2 MB or more are 2 MB aligned and asked to live on transparent huge pages
// (the host's THP mode is usually `madvise`, so only asked memory gets them),
// smaller ones are 64-byte aligned so that vectors start on a cache line.
// The large ones follow --numa's policy (base/numa.h).
// With 4 KB pages a stream of weights crosses a page every 4 KB, and the
// hardware prefetchers, which stop at page boundaries, restart on each: the
// repacked weights of a decode step read at a fraction of the bandwidth.
#pragma once
#include <cstddef>
#include <new>

namespace cs {

constexpr size_t kHugePage = size_t(2) << 20;

// Aligned as above; the size is rounded up to the alignment. Throws
// std::bad_alloc. Free with free_hinted.
void* allocate_hinted(size_t bytes);

// A std::allocator on allocate_hinted, for the vectors of weights.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_hinted(n * sizeof(T))); }
  void deallocate(T* p, size_t) noexcept;
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

void free_hinted(void* p) noexcept;
template <class T>
void HugePageAllocator<T>::deallocate(T* p, size_t) noexcept {
  free_hinted(p);
}

}  // namespace cs
