#include "kv/split_kv.h"

#include <algorithm>

#include "base/error.h"

namespace cs {

void SplitKv::begin_batch(const Batch& batch) {
  const int n = batch.size();
  if (split_ < 0 || split_ > n)
    throw Error("split at row " + std::to_string(split_) + " of a batch of " + std::to_string(n));
  n_first_ = n_second_ = 0;
  auto begin = [&](KvStore& s, int from, int to) {
    if (from == to) return;
    part_ = Batch{};
    for (int i = from; i < to; ++i)
      part_.add(batch.tokens[size_t(i)], batch.pos[size_t(i)], batch.seq[size_t(i)], batch.logits[size_t(i)]);
    s.begin_batch(part_);
  };
  begin(first_, 0, split_);
  n_first_ = split_;
  begin(second_, split_, n);
  n_second_ = n - split_;
}

void SplitKv::store(int layer, const float* k, const float* v) {
  if (n_first_) first_.store(layer, k, v);
  const size_t off = size_t(n_first_) * size_t(kv_row_);
  if (n_second_) second_.store(layer, k + off, v + off);
}

void SplitKv::attend(int layer, const float* q, float* out, const LayerAttention& how) {
  if (n_first_) first_.attend(layer, q, out, how);
  const size_t off = size_t(n_first_) * size_t(q_row_);
  if (n_second_) second_.attend(layer, q + off, out + off, how);
}

}  // namespace cs
