#include "kv/contiguous_kv.h"

#include <cstring>
#include <string>

#include "attn/dense.h"

namespace cs {

ContiguousKv::ContiguousKv(KvShape shape, int max_tokens) : shape_(shape), max_tokens_(max_tokens) {}

int ContiguousKv::length(int seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.len;
}

void ContiguousKv::remove(int seq) { seqs_.erase(seq); }

void ContiguousKv::begin_batch(const Batch& batch) {
  std::map<int, int> added;
  for (int s : batch.seq) ++added[s];
  for (auto [s, n] : added)
    if (length(s) + n > max_tokens_)
      throw KvFull("sequence " + std::to_string(s) + " would hold " +
                   std::to_string(length(s) + n) + " tokens, more than the context of " +
                   std::to_string(max_tokens_));
  tok_seq_.clear();
  tok_idx_.clear();
  const size_t w = size_t(shape_.kv_width());
  for (int s : batch.seq) {
    Seq& q = seqs_[s];
    if (q.k.empty()) q.k.resize(shape_.n_layers), q.v.resize(shape_.n_layers);
    tok_seq_.push_back(&q);
    tok_idx_.push_back(q.len++);
    for (int l = 0; l < shape_.n_layers; ++l) {
      q.k[l].resize(size_t(q.len) * w);
      q.v[l].resize(size_t(q.len) * w);
    }
  }
}

void ContiguousKv::store(int layer, const float* k, const float* v) {
  const size_t w = size_t(shape_.kv_width());
  for (size_t t = 0; t < tok_seq_.size(); ++t) {
    std::memcpy(tok_seq_[t]->k[layer].data() + size_t(tok_idx_[t]) * w, k + t * w, w * 4);
    std::memcpy(tok_seq_[t]->v[layer].data() + size_t(tok_idx_[t]) * w, v + t * w, w * 4);
  }
}

void ContiguousKv::attend(int layer, const float* q, float* out) {
  const int n_tok = int(tok_seq_.size());
  const int H = shape_.n_heads, D = shape_.head_dim;
  const int group = H / shape_.n_kv_heads;
#pragma omp parallel for schedule(dynamic) collapse(2) if (n_tok * H > 4)
  for (int t = 0; t < n_tok; ++t) {
    for (int h = 0; h < H; ++h) {
      const Seq& s = *tok_seq_[t];
      const int kvh = h / group;
      DenseKv kv{s.k[layer].data() + size_t(kvh) * D, s.v[layer].data() + size_t(kvh) * D,
                 size_t(shape_.kv_width()), tok_idx_[t] + 1};
      attend_one(q + (size_t(t) * H + h) * D, kv, D, out + (size_t(t) * H + h) * D);
    }
  }
}

}  // namespace cs
