// The prefix tree's content as routers see a KV cache: fixed-size blocks of
// tokens, each named by a hash chained from its parent block's (the model of
// vLLM's KV events, which prefix-aware routers read). A chunk of 64 tokens is
// 64/B blocks of B tokens; a block exists once its B tokens are in a chunk
// of the tree. The ledger watches the tree (TreeObserver) and records, in
// order, each block that becomes held (kStored: its hash, its parent's, its
// tokens) and each that stops being held (kRemoved). Two chunks can hold the
// same block (a partial chunk copied for a new branch): the ledger counts
// holders, so the events describe the set of distinct blocks exactly.
//
// Not in it: pinned Prompt Cache chunks and detached sequences' own chunks,
// which no join finds (their K/V sit at a schema's positions, not at 0..n).
//
// Threading: the tree's writer thread only, like the tree.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/tree_observer.h"

namespace cs {

struct BlockEvent {
  enum class Kind { kStored, kRemoved };
  Kind kind = Kind::kStored;
  uint64_t hash = 0;
  std::optional<uint64_t> parent;  // kStored: the previous block's hash (none for a prompt's first block)
  std::vector<int32_t> tokens;     // kStored: the block's tokens
};

// The hash of a block: 63 bits of SHA-256 over the parent's hash and the
// tokens (little-endian), so equal prefixes get equal hashes on every replica
// and the value fits a signed 64-bit integer, whatever a subscriber decodes it as.
uint64_t block_hash(std::optional<uint64_t> parent, std::span<const int32_t> tokens);

class BlockLedger : public TreeObserver {
 public:
  // block_size must divide chunk_size.
  BlockLedger(int block_size, int chunk_size);

  void grown(ChunkId c, ChunkId parent, std::span<const int32_t> tokens, int before) override;
  void removed(ChunkId c) override;

  // Work in progress: a prompt whose prefill was just admitted holds its
  // full blocks from now (announced if new), as the tree will once they are
  // computed, so that a router sends the same prompt here while it is being
  // computed, not only after. `owner` (the sequence) holds them until
  // release(owner): when its prefill is done (the tree holds them then) or it
  // stops before (its blocks are removed unless a chunk holds them).
  void reserve(uint64_t owner, std::span<const int32_t> prompt);
  void release(uint64_t owner);

  // The events recorded since the last call, oldest first.
  std::vector<BlockEvent> take();
  // Distinct blocks held now.
  size_t blocks() const { return holders_.size(); }
  int block_size() const { return block_size_; }

 private:
  int block_size_;
  std::vector<std::vector<uint64_t>> chunk_blocks_;  // per chunk id: its full blocks' hashes
  std::unordered_map<uint64_t, int> holders_;        // block hash -> chunks and reservations holding it
  std::unordered_map<uint64_t, std::vector<uint64_t>> reserved_;  // owner -> its blocks, root first
  std::vector<BlockEvent> pending_;
};

}  // namespace cs
