// What the prefix tree tells those who watch it (kv/prefix_tree.h:
// observe()), on its writer thread, as it happens: the block ledger (the
// router's view, kv/block_ledger.h) and the disk tier's staging
// (cache/disk_staging.h) subscribe, instead of the tree calling them. A chunk
// named in an event still holds its id and its bytes for the call.
#pragma once
#include <cstdint>
#include <span>

#include "kv/chunk_pool.h"

namespace cs {

class TreeObserver {
 public:
  virtual ~TreeObserver() = default;
  // Chunk `c`, a node of the tree under `parent` (kNoChunk: the root), holds
  // `tokens` now; it held their first `before` before this call.
  virtual void grown(ChunkId c, ChunkId parent, std::span<const int32_t> tokens, int before) = 0;
  // Chunk `c` left the tree (evicted or freed); its id may be reused next.
  virtual void removed(ChunkId c) = 0;
  // Chunk `c`, in the tree, has no reader left and is kept (retained); after
  // a leave, the sequence's chunks are told root first.
  virtual void retained(ChunkId) {}
  // A second sequence has joined through chunk `c` (a shared prefix, which
  // under load may never be retained).
  virtual void shared(ChunkId) {}
  // Chunk `c` is about to be evicted (then removed).
  virtual void evicting(ChunkId) {}
};

}  // namespace cs
