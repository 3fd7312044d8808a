// One forward pass over two KV stores: the batch's first rows belong to one
// store, the rest to the other. The engine uses it to run a Prompt Cache
// schema's encoding (a scaffold in a private store) inside its steps, beside
// the requests' tokens: the weights are read once for both, and since every
// row is computed alone, each store gets exactly what it would get on its own.
#pragma once
#include "kv/kv_store.h"

namespace cs {

class SplitKv : public KvStore {
 public:
  // kv_row: floats per K or V row (kv heads x head dim); q_row: floats per
  // query or output row (heads x head dim).
  SplitKv(KvStore& first, KvStore& second, int kv_row, int q_row)
      : first_(first), second_(second), kv_row_(kv_row), q_row_(q_row) {}

  // The next batch's first `rows` tokens go to the first store.
  void set_split(int rows) { split_ = rows; }

  // Throws what the stores throw. The first store begins first: when the
  // second then fails, the first holds the batch's rows (treat the step as
  // failed for both).
  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out, const LayerAttention& how) override;

 private:
  KvStore& first_;
  KvStore& second_;
  int kv_row_, q_row_;
  int split_ = 0;
  int n_first_ = 0, n_second_ = 0;  // rows of the batch begun
  Batch part_;
};

}  // namespace cs
