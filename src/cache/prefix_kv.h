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
#include <vector>

#include "attn/attention.h"
#include "cache/sequence_cache.h"
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
  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) override {
    return tree_.join(id, tokens, matched);
  }
  KvStatus join_detached(SeqId id) override { return tree_.join_detached(id); }
  KvStatus attach(SeqId id, std::span<const ChunkId> chunks) override { return tree_.attach_pinned(id, chunks); }
  KvStatus leave(SeqId id) override { return tree_.leave(id); }
  KvStatus fork(SeqId parent, SeqId child) { return tree_.fork(parent, child); }

  // Chunks the batch would allocate, and how many can be had: begin_batch
  // fails when the first exceeds the second.
  int chunks_needed(const Batch& batch) const override;
  int chunks_available() const override { return tree_.available(); }
  int chunks_to_append(SeqId id, int n) const override { return tree_.chunks_to_append(id, n); }
  int chunk_size() const override { return tree_.layout().chunk_size; }

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;

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

  PrefixTree tree_;
  int n_heads_;
  AttnPath path_;
  AttnPlan plan_;
  AttnWorkspace ws_;
  std::vector<SeqTokens> groups_;
  std::vector<std::pair<ChunkId, int>> slot_;  // per batch token: chunk and offset of its K/V
  std::vector<int> row_of_tok_;                // batch token -> query row in context order
  std::vector<float> q_, out_;
};

}  // namespace cs
