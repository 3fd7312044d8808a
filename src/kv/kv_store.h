// The model's view of KV storage. The Llama forward pass writes each layer's
// K and V through store() and reads attention through attend(); it never sees
// how KV is laid out. The implementations live a floor up, in src/cache: a
// contiguous per-sequence cache and the prefix-aware chunk cache.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_status.h"

namespace cs {

// The tokens of one forward call. Tokens of several sequences may be mixed;
// within a sequence they are in order and follow what that sequence already
// cached. Position IDs (RoPE) are free: they need not be contiguous.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;     // RoPE position id per token
  std::vector<int32_t> seq;     // sequence id per token
  std::vector<uint8_t> logits;  // 1 = the caller wants this token's logits

  void add(int32_t token, int32_t position, int32_t sequence, bool want_logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(sequence);
    logits.push_back(want_logits);
  }
  int size() const { return int(tokens.size()); }
};

// The attention shape a store serves: per layer, n_heads query heads read
// n_kv_heads K/V heads of head_dim floats.
struct KvShape {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int kv_width() const { return n_kv_heads * head_dim; }
};

// How one layer attends, beyond its queries and keys (KvStore::attend).
struct LayerAttention {
  // A sliding-window layer's window in positions (Gemma, gpt-oss); 0: global.
  int window = 0;
  // gpt-oss: per query head, a logit that takes part in the softmax's
  // denominator with no value (attn/state.h, finalize); null: none.
  const float* sinks = nullptr;
  // Gemma 2: each score s becomes softcap * tanh(s / softcap) before the
  // softmax; 0: none.
  float softcap = 0.0f;
};

// A sliding window's edge: the index of the first of a sequence's keys
// (their positions `pos`, increasing) that a query at position `p` sees, the
// keys at positions above p - window. Both stores apply it.
inline int first_in_window(std::span<const int32_t> pos, int32_t p, int window) {
  return int(std::lower_bound(pos.begin(), pos.end(), int64_t(p) - window + 1) - pos.begin());
}

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Reserves room for the batch's tokens at the end of their sequences.
  // Throws KvError (no change made): kPoolExhausted or kContextFull when
  // there is no room (the caller can shrink the batch, queue or preempt),
  // kUnknownSequence for a sequence the store does not know.
  virtual void begin_batch(const Batch& batch) = 0;
  // K and V of one layer for every token of the batch, rows of
  // n_kv_heads * head_dim floats.
  virtual void store(int layer, const float* k, const float* v) = 0;
  // Causal attention for one layer: each query row (n_heads * head_dim) sees
  // its own sequence's cached tokens up to and including itself; with a
  // how.window > 0 (a sliding-window layer), only those whose position id is
  // above the row's minus the window (llama.cpp's rule: the last `window`
  // positions). Windows are in positions, not tokens: a Prompt Cache prompt's
  // keys sit at its layout's positions. A sequence's positions must increase.
  // how.window, how.sinks and how.softcap: LayerAttention's.
  virtual void attend(int layer, const float* q, float* out, const LayerAttention& how) = 0;
  // Whether store() and attend() take device pointers (a store whose KV is
  // on the GPU); host pointers otherwise.
  virtual bool on_device() const { return false; }
};

}  // namespace cs
