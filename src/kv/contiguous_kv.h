// A KV cache with one contiguous fp32 buffer per sequence and layer: the
// simple cache that needs no sharing. Sequences are created on first use and
// dropped with remove(). Single-threaded use (the engine's thread).
#pragma once
#include <map>
#include <vector>

#include "kv/kv_store.h"

namespace cs {

struct KvShape {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int kv_width() const { return n_kv_heads * head_dim; }
};

class ContiguousKv : public KvStore {
 public:
  // max_tokens bounds each sequence's length (the context size).
  ContiguousKv(KvShape shape, int max_tokens);

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out) override;

  int length(int seq) const;  // tokens cached for seq (0 if unknown)
  void remove(int seq);

 private:
  struct Seq {
    int len = 0;
    std::vector<std::vector<float>> k, v;  // [layer][token * kv_width]
  };
  KvShape shape_;
  int max_tokens_;
  std::map<int, Seq> seqs_;
  std::vector<Seq*> tok_seq_;  // per batch token
  std::vector<int> tok_idx_;   // per batch token: its index in the sequence
};

}  // namespace cs
