// The model's KvStore backed by the prefix-aware chunk cache and the attention
// kernels: what makes shared prompt prefixes cost memory and time once.
//
// Sequences are explicit: join() starts one (sharing whatever of its tokens
// the tree already holds; prefill then runs only the tokens after `matched`),
// leave() ends it, fork() copies one for parallel sampling. A batch naming a
// sequence that did not join is an error (KvError kUnknownSequence).
// begin_batch appends the batch's tokens (KvError kPoolExhausted, nothing
// changed, when the pool has no room) and plans the batch's attention once
// (attn/attention.h); store() writes their K/V; attend() runs the chosen
// kernel on that plan for each layer. Single-threaded use (the engine
// thread), like the tree it owns; attend() itself is parallel.
#pragma once
#include <span>
#include <unordered_map>
#include <vector>

#include "attn/attention.h"
#include "cache/sequence_cache.h"
#include "kv/disk_tier.h"
#include "kv/kv_store.h"
#include "kv/prefix_tree.h"

namespace cs {

enum class AttnPath { kPerSequence, kTwoPhase, kRelay };

class PrefixKv : public KvStore, public SequenceCache {
 public:
  // retain: keep the chunks of sequences that left, for later joins.
  PrefixKv(KvLayout layout, size_t capacity_bytes, int n_heads, AttnPath path = AttnPath::kTwoPhase,
           bool retain = true);

  // Starts sequence `id` with `tokens` already known (it shares every full
  // chunk the tree holds for them, and copies a partial match); *matched is
  // how many leading tokens have their K/V present. The caller appends the
  // rest through batches. Join with no tokens to share nothing.
  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) override;
  KvStatus join_detached(SeqId id) override;
  KvStatus attach(SeqId id, std::span<const ChunkId> chunks, std::span<const int32_t> positions) override;
  KvStatus leave(SeqId id) override;
  KvStatus fork(SeqId parent, SeqId child);

  // Chunks the batch would allocate, and how many can be had: begin_batch
  // fails when the first exceeds the second.
  int chunks_needed(const Batch& batch) const override;
  int chunks_available() const override { return tree_.available(); }
  int chunks_to_append(SeqId id, int n) const override { return tree_.chunks_to_append(id, n); }
  int chunk_size() const override { return tree_.layout().chunk_size; }

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out, int window) override;

  // --- The disk tier (kv/disk_tier.h; not owned): full chunks leaving the
  // pool, and shared prefixes, are stored there; prepare() reads back what
  // continues a prompt's match, and take_loads() (each step) collects it.
  void attach_disk(DiskTier* disk);
  Prep prepare(SeqId id, std::span<const int32_t> known, int room, int* from_disk) override;
  void forget(SeqId id) override { loads_.erase(id); }
  void take_loads();
  // Stores every full chunk of the tree (a clean shutdown), waiting for room.
  void persist_all();

  const PrefixTree& tree() const { return tree_; }
  PrefixTree& tree() { return tree_; }
  const AttnPlan& plan() const { return plan_; }

 private:
  // The batch's tokens grouped by sequence, in first-appearance order.
  struct SeqTokens {
    SeqId id;
    std::vector<int32_t> tokens;
  };
  void group(const Batch& batch, std::vector<SeqTokens>& out) const;
  // Per query row, the first key a sliding window of `window` positions
  // lets it see (computed once per batch and window).
  const int* window_first(int window);

  // Chunks read for a sequence waiting to join.
  struct Load {
    bool done = false;
    DiskLoad got;
    int start = 0;  // token index of its first chunk
    ChunkKey first;  // its first chunk's key
  };
  void persist(ChunkId c);

  PrefixTree tree_;
  DiskTier* disk_ = nullptr;
  bool persist_wait_ = false;  // persist_all: block for queue room instead of dropping
  std::unordered_map<SeqId, Load> loads_;
  int n_heads_;
  AttnPath path_;
  AttnPlan plan_;
  AttnWorkspace ws_;
  std::vector<SeqTokens> groups_;
  std::vector<std::pair<ChunkId, int>> slot_;  // per batch token: chunk and offset of its K/V
  std::vector<int> row_of_tok_;                // batch token -> query row in context order
  // Per live sequence, its keys' position ids (a prefix joined from the tree
  // sits at 0, 1, 2, ...; attached module chunks at their layout's); only
  // sliding windows read them.
  std::unordered_map<SeqId, std::vector<int32_t>> pos_;
  std::vector<int> win_first_;    // per query row: see window_first
  int win_ = 0;                   // the window win_first_ is for (0: none yet)
  std::vector<float> q_, out_;
};

}  // namespace cs
