#include "kv/chunk_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace cs {

size_t kv_type_size(KvType t) { return t == KvType::kF32 ? 4 : 2; }

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    default: return "bf16";
  }
}

void ChunkPool::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

ChunkPool::ChunkPool(KvLayout layout, size_t capacity_bytes) : layout_(layout) {
  const size_t cb = layout_.chunk_bytes();
  capacity_ = cb ? int(std::min<size_t>(capacity_bytes / cb, size_t(INT32_MAX / 2))) : 0;
  if (capacity_ > 0) {
    // Pools of 2 MB or more are 2 MB aligned and asked to live on huge pages:
    // attention walks blocks scattered over the whole pool, and with 4 KB
    // pages every 16 KB block costs TLB misses and page walks (the kernels'
    // prefetches among them). Smaller pools: 64-byte alignment, so every K/V
    // block starts on a cache line.
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t align = size_t(capacity_) * cb >= kHuge ? kHuge : 64;
    const size_t bytes = (size_t(capacity_) * cb + align - 1) / align * align;
    memory_.reset(static_cast<uint8_t*>(std::aligned_alloc(align, bytes)));
    if (!memory_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (align == kHuge) madvise(memory_.get(), bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
    // Touched now, as llama.cpp clears its KV buffer: the pool is resident
    // from the start (a server's memory does not creep up as the prefix
    // cache fills), page faults stay out of the first requests, and memory
    // that is not there fails start-up rather than a request.
    std::memset(memory_.get(), 0, bytes);
    base_ = memory_.get();
  }
  free_.reserve(size_t(capacity_));
  for (ChunkId id = capacity_ - 1; id >= 0; --id) free_.push_back(id);
}

ChunkId ChunkPool::allocate() {
  if (free_.empty()) return -1;
  const ChunkId id = free_.back();
  free_.pop_back();
  peak_ = std::max(peak_, used_count());
  return id;
}

void ChunkPool::release(ChunkId id) { free_.push_back(id); }

}  // namespace cs
