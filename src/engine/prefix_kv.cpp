#include "engine/prefix_kv.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace cs {

PrefixKv::PrefixKv(PrefixTree& tree, int n_heads, AttnPath path)
    : tree_(tree), n_heads_(n_heads), path_(path) {}

void PrefixKv::begin_batch(const Batch& batch) {
  // Tokens of a sequence are appended in batch order; check room for all of
  // them first so a full pool changes nothing.
  std::map<SeqId, std::vector<int32_t>> add;
  for (int t = 0; t < batch.size(); ++t) add[batch.seq[size_t(t)]].push_back(batch.tokens[size_t(t)]);
  int need = 0;
  for (const auto& [id, toks] : add) need += tree_.chunks_to_append(id, int(toks.size()));
  if (need > tree_.available())
    throw KvFull("KV pool full: the batch needs " + std::to_string(need) + " chunks, " +
                 std::to_string(tree_.available()) + " available");
  std::map<SeqId, int> next;
  for (const auto& [id, toks] : add) {
    if (!tree_.contains(id)) {
      int matched;
      if (!tree_.join(id, {}, &matched).ok()) throw Error("sequence " + std::to_string(id) + " cannot join");
    }
    next[id] = tree_.length(id);
    const KvStatus st = tree_.append(id, toks);
    if (!st.ok()) throw KvFull(st.message);
  }
  tok_seq_.assign(batch.seq.begin(), batch.seq.end());
  tok_idx_.clear();
  for (SeqId id : tok_seq_) tok_idx_.push_back(next[id]++);

  // The kernels take query rows grouped by sequence in context order.
  ctx_ = tree_.context();
  std::vector<int> rows(ctx_->seqs.size(), 0);
  std::map<SeqId, int> index;
  for (size_t i = 0; i < ctx_->seqs.size(); ++i) index[ctx_->seqs[i]] = int(i);
  for (SeqId id : tok_seq_) ++rows[size_t(index.at(id))];
  q_begin_.assign(1, 0);
  for (int r : rows) q_begin_.push_back(q_begin_.back() + r);
  std::vector<int> fill(q_begin_.begin(), q_begin_.end() - 1);
  row_of_tok_.clear();
  for (SeqId id : tok_seq_) row_of_tok_.push_back(fill[size_t(index.at(id))]++);
}

void PrefixKv::store(int layer, const float* k, const float* v) {
  const KvLayout& L = tree_.layout();
  const size_t w = size_t(L.n_kv_heads) * L.head_dim;
  for (size_t t = 0; t < tok_seq_.size(); ++t)
    for (int h = 0; h < L.n_kv_heads; ++h)
      tree_.write_kv(tok_seq_[t], tok_idx_[t], layer, h, k + t * w + size_t(h) * L.head_dim,
                     v + t * w + size_t(h) * L.head_dim);
}

void PrefixKv::attend(int layer, const float* q, float* out) {
  const size_t w = size_t(n_heads_) * tree_.layout().head_dim;
  q_.resize(tok_seq_.size() * w);
  out_.resize(q_.size());
  for (size_t t = 0; t < tok_seq_.size(); ++t)
    std::memcpy(q_.data() + size_t(row_of_tok_[t]) * w, q + t * w, w * 4);
  AttnProblem p;
  p.tree = &tree_;
  p.ctx = ctx_.get();
  p.layer = layer;
  p.n_heads = n_heads_;
  p.q = q_.data();
  p.q_begin = q_begin_;
  p.out = out_.data();
  switch (path_) {
    case AttnPath::kPerSequence: attn_per_sequence(p); break;
    case AttnPath::kTwoPhase: attn_tpp(p); break;
    case AttnPath::kRelay: attn_relay(p); break;
  }
  for (size_t t = 0; t < tok_seq_.size(); ++t)
    std::memcpy(out + t * w, out_.data() + size_t(row_of_tok_[t]) * w, w * 4);
}

}  // namespace cs
