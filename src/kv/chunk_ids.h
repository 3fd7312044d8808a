// Which chunk ids are free (the prefix tree's allocator): a free list of
// `capacity` ids, the most recently freed first, O(1) both ways. Ids name
// chunks of a KvMemory (kv/kv_memory.h), which holds their bytes; this class
// never touches them.
#pragma once
#include <algorithm>
#include <vector>

#include "kv/chunk_pool.h"

namespace cs {

class ChunkIds {
 public:
  explicit ChunkIds(int capacity) : capacity_(std::max(0, capacity)) {
    free_.reserve(size_t(capacity_));
    for (ChunkId id = capacity_ - 1; id >= 0; --id) free_.push_back(id);
  }
  int capacity() const { return capacity_; }
  int free_count() const { return int(free_.size()); }
  int used_count() const { return capacity_ - free_count(); }
  int peak_used() const { return peak_; }

  // kNoChunk when every id is taken.
  ChunkId allocate() {
    if (free_.empty()) return kNoChunk;
    const ChunkId id = free_.back();
    free_.pop_back();
    peak_ = std::max(peak_, used_count());
    return id;
  }
  void release(ChunkId id) { free_.push_back(id); }

 private:
  int capacity_;
  std::vector<ChunkId> free_;
  int peak_ = 0;
};

}  // namespace cs
