#include "kv/chunk_pool.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "base/huge_pages.h"

namespace cs {

size_t kv_type_size(KvType t) { return t == KvType::kF32 ? 4 : 2; }

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    default: return "bf16";
  }
}

void ChunkPool::FreeDeleter::operator()(uint8_t* p) const { free_hinted(p); }

int KvLayout::chunks_in(size_t bytes) const {
  const size_t cb = chunk_bytes();
  return cb ? int(std::min<size_t>(bytes / cb, size_t(INT32_MAX / 2))) : 0;
}

ChunkPool::ChunkPool(KvLayout layout, size_t capacity_bytes) : layout_(layout) {
  const size_t cb = layout_.chunk_bytes();
  capacity_ = layout_.chunks_in(capacity_bytes);
  if (capacity_ > 0) {
    // On huge pages when 2 MB or more (base/huge_pages.h): attention walks
    // blocks scattered over the whole pool, and with 4 KB pages every 16 KB
    // block costs TLB misses and page walks (the kernels' prefetches among
    // them). Smaller pools: 64-byte alignment, so every K/V block starts on
    // a cache line.
    const size_t bytes = size_t(capacity_) * cb;
    memory_.reset(static_cast<uint8_t*>(allocate_hinted(bytes)));
    // Touched now, as llama.cpp clears its KV buffer: the pool is resident
    // from the start (a server's memory does not creep up as the prefix
    // cache fills), page faults stay out of the first requests, and memory
    // that is not there fails start-up rather than a request.
    std::memset(memory_.get(), 0, bytes);
    base_ = memory_.get();
  }
}

}  // namespace cs
