// The model's KvStore backed by the prefix-aware chunk cache and the attention
// kernels: what makes shared prompt prefixes cost memory and time once.
//
// Sequences join the tree first (PrefixTree::join with their prompt; prefill
// then runs only the tokens after `matched`). A sequence the tree does not know
// joins with an empty prompt on its first batch. begin_batch appends the
// batch's tokens (KvFull, nothing changed, when the pool has no room);
// store() writes their K/V; attend() runs the chosen kernel over the tree's
// kernel context. Single-threaded use (the engine thread), like the tree.
#pragma once
#include <vector>

#include "attn/attention.h"
#include "kv/kv_store.h"
#include "kv/prefix_tree.h"

namespace cs {

enum class AttnPath { kPerSequence, kTwoPhase, kRelay };

class PrefixKv : public KvStore {
 public:
  PrefixKv(PrefixTree& tree, int n_heads, AttnPath path = AttnPath::kTwoPhase);

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;

  PrefixTree& tree() { return tree_; }

 private:
  PrefixTree& tree_;
  int n_heads_;
  AttnPath path_;
  std::vector<SeqId> tok_seq_;  // per batch token
  std::vector<int> tok_idx_;    // per batch token: index in its sequence
  std::shared_ptr<const KernelContext> ctx_;
  std::vector<int> q_begin_;    // rows per context sequence
  std::vector<int> row_of_tok_; // batch token -> row in context order
  std::vector<float> q_, out_;
};

}  // namespace cs
