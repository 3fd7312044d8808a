// What the scheduler asks of the KV cache, without seeing how it is kept
// (as vLLM v1's scheduler asks its KV cache manager): start a sequence with
// the tokens it knows and learn how many are already cached, end it, and
// count the room a step or an admission needs (ChunkAttention §4.2's
// continuous batching over a prefix tree). PrefixKv implements it.
// Single-threaded use (the engine thread).
#pragma once
#include <cstdint>
#include <span>

#include "kv/kv_status.h"
#include "kv/kv_store.h"
#include "kv/prefix_tree.h"

namespace cs {

class SequenceCache {
 public:
  virtual ~SequenceCache() = default;
  // Starts sequence `id` with `tokens` known; *matched is how many leading
  // tokens have their K/V present (shared, not recomputed).
  virtual KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) = 0;
  // Starts a sequence that shares nothing by prefix (a Prompt Cache prompt:
  // its cached spans are attached as its computation reaches them).
  virtual KvStatus join_detached(SeqId id) = 0;
  // Appends pinned chunks (a module's) to a detached sequence; `positions`
  // are their tokens' position ids (the layout's).
  virtual KvStatus attach(SeqId id, std::span<const ChunkId> chunks, std::span<const int32_t> positions) = 0;
  // Ends a sequence; what it cached may stay for later joins.
  virtual KvStatus leave(SeqId id) = 0;
  // Cuts a live sequence back to its first n tokens (rejected drafts).
  virtual KvStatus truncate(SeqId id, int n) = 0;
  // Chunks appending n tokens to sequence `id` would take.
  virtual int chunks_to_append(SeqId id, int n) const = 0;
  // Chunks the batch would take; how many can be had (free or evictable).
  virtual int chunks_needed(const Batch& batch) const = 0;
  virtual int chunks_available() const = 0;
  virtual int chunk_size() const = 0;

  // A lower tier (the disk, kv/disk_tier.h): before joining, the scheduler
  // asks whether more of the tokens can be brought in than the tree holds.
  // kLoading: they are being read (ask again later; the sequence waits,
  // others go on); kNoRoom: they are read but `room` chunks cannot take
  // them (wait as for prefill room); kReady: join now (*from_disk tokens
  // were brought into the tree for it).
  enum class Prep { kReady, kLoading, kNoRoom };
  virtual Prep prepare(SeqId, std::span<const int32_t>, int /*room*/, int* from_disk) {
    *from_disk = 0;
    return Prep::kReady;
  }
  // The sequence will not join (cancelled while waiting): drop what was read for it.
  virtual void forget(SeqId) {}
};

}  // namespace cs
