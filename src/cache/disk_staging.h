// The disk tier beside the chunk cache (as vLLM keeps its KV connector apart
// from the cache manager): names the tree's full chunks by chained keys
// (kv/chunk_key.h), stores them in the DiskTier when the tree says they are
// worth keeping, and brings back, before a prompt joins, the chunks the tier
// holds beyond the tree's match.
//
// It learns of chunks through the tree's events (kv/tree_observer.h), so the
// tree never calls it: a full chunk is stored when its last reader leaves
// (retained; root first, so a kill part-way leaves a usable prefix on disk),
// when a second sequence joins through it (a shared prefix that may never be
// retained under load), and just before it is evicted. Bytes are read from
// the KvMemory straight into the tier's queue.
//
// Single-threaded use (the engine thread), like the tree.
#pragma once
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/sequence_cache.h"
#include "kv/disk_tier.h"
#include "kv/kv_memory.h"
#include "kv/prefix_tree.h"

namespace cs {

class DiskStaging final : public TreeObserver {
 public:
  // Keys every full chunk already in the tree, and watches it from now on.
  DiskStaging(PrefixTree& tree, KvMemory& memory, DiskTier& disk);
  ~DiskStaging() override;
  DiskStaging(const DiskStaging&) = delete;
  DiskStaging& operator=(const DiskStaging&) = delete;

  // SequenceCache::prepare's answer for a prompt (sequence_cache.h): the
  // tree's full-chunk match, then the chunks the disk holds beyond it, read
  // once per wait and adopted into the tree (as retained chunks, which the
  // join then shares) when `room` chunks can take them.
  SequenceCache::Prep prepare(SeqId id, std::span<const int32_t> known, int room, int* from_disk);
  // The sequence will not join: drop what was read for it.
  void forget(SeqId id) { loads_.erase(id); }
  // Collects the reads the tier answered (each step).
  void take_loads();
  // Stores every full chunk of the tree (a clean shutdown), waiting for room.
  void persist_all();
  // Whether the tier holds chunk c (a full chunk of the tree).
  bool on_disk(ChunkId c) const { return keyed_[size_t(c)] && disk_.has(keys_[size_t(c)]); }

  void grown(ChunkId c, ChunkId parent, std::span<const int32_t> tokens, int before) override;
  void removed(ChunkId c) override { keyed_[size_t(c)] = false; }
  void retained(ChunkId c) override { persist(c); }
  void shared(ChunkId c) override { persist(c); }
  void evicting(ChunkId c) override { persist(c); }

 private:
  const ChunkKey& key_of(ChunkId c) const { return c < 0 ? disk_.root() : keys_[size_t(c)]; }
  void persist(ChunkId c);

  // Chunks read for a sequence waiting to join.
  struct Load {
    bool done = false;
    DiskLoad got;
    int start = 0;   // token index of its first chunk
    ChunkKey first;  // its first chunk's key
  };

  PrefixTree& tree_;
  KvMemory& memory_;
  DiskTier& disk_;
  std::vector<ChunkKey> keys_;  // per chunk id: its key, while keyed_
  std::vector<char> keyed_;     // per chunk id: full, in the tree, named
  bool wait_ = false;           // persist_all: block for queue room instead of dropping
  std::unordered_map<SeqId, Load> loads_;
};

}  // namespace cs
