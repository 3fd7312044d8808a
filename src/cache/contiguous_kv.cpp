#include "cache/contiguous_kv.h"

#include <algorithm>
#include <string>

#include "attn/block.h"
#include "attn/dense.h"
#include "attn/state.h"
#include "base/f16.h"

namespace cs {

ContiguousKv::ContiguousKv(KvShape shape, int max_tokens, KvType type)
    : shape_(shape), max_tokens_(max_tokens), type_(type), es_(kv_type_size(type)) {}

int ContiguousKv::length(int seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.len;
}

void ContiguousKv::remove(int seq) { seqs_.erase(seq); }

size_t ContiguousKv::head_bytes() const { return 2 * size_t(shape_.head_dim) * kDenseBlock * es_; }

size_t ContiguousKv::block_bytes() const { return size_t(shape_.n_kv_heads) * head_bytes(); }

uint8_t* ContiguousKv::k_slot(Seq& s, int layer, int idx, int kv_head) {
  return s.kv[size_t(layer)].data() + size_t(idx / kDenseBlock) * block_bytes() + size_t(kv_head) * head_bytes() +
         size_t(idx % kDenseBlock) * es_;
}

uint8_t* ContiguousKv::v_slot(Seq& s, int layer, int idx, int kv_head) {
  const size_t d = size_t(shape_.head_dim);
  return k_slot(s, layer, idx - idx % kDenseBlock, kv_head) + (d * kDenseBlock + size_t(idx % kDenseBlock) * d) * es_;
}

void ContiguousKv::begin_batch(const Batch& batch) {
  std::map<int, int> added;
  for (int s : batch.seq) ++added[s];
  for (auto [s, n] : added)
    if (length(s) + n > max_tokens_)
      throw KvError({KvCode::kContextFull, "sequence " + std::to_string(s) + " would hold " +
                                               std::to_string(length(s) + n) +
                                               " tokens, more than the context of " + std::to_string(max_tokens_)});
  tok_seq_.clear();
  tok_idx_.clear();
  for (int s : batch.seq) {
    Seq& q = seqs_[s];
    if (q.kv.empty()) q.kv.resize(size_t(shape_.n_layers));
    tok_seq_.push_back(&q);
    q.pos.push_back(batch.pos[tok_idx_.size()]);
    tok_idx_.push_back(q.len++);
    const size_t need = size_t((q.len + kDenseBlock - 1) / kDenseBlock) * block_bytes();
    for (auto& buf : q.kv)
      if (buf.size() < need) buf.resize(need);
  }
  plan_rows();
}

// Groups the batch's query rows by (sequence, KV head) and cuts them into
// attend_rows calls. A call's rows share every K/V block they read, so a
// GQA group's query heads and a prefill's tokens go through the block kernel
// together (one GEMM per block instead of one dot product per key and row).
void ContiguousKv::plan_rows() {
  const int H = shape_.n_heads, D = shape_.head_dim, group = H / shape_.n_kv_heads;
  std::map<const Seq*, std::vector<int>> toks;  // sequence -> its batch tokens, in order
  std::vector<const Seq*> seqs;
  for (size_t t = 0; t < tok_seq_.size(); ++t) {
    auto [it, fresh] = toks.try_emplace(tok_seq_[t]);
    if (fresh) seqs.push_back(tok_seq_[t]);
    it->second.push_back(int(t));
  }
  row_off_.clear();
  row_visible_.clear();
  row_seq_.clear();
  win_ = 0;
  work_.clear();
  splits_.clear();
  constexpr int kRowsPerCall = 64;
  for (const Seq* s : seqs)
    for (int kvh = 0; kvh < shape_.n_kv_heads; ++kvh) {
      const int r0 = int(row_off_.size());
      for (int t : toks[s])
        for (int g = 0; g < group; ++g) {
          row_off_.push_back((size_t(t) * H + size_t(kvh * group + g)) * D);
          row_visible_.push_back(tok_idx_[size_t(t)] + 1);
          row_seq_.push_back(s);
        }
      const int r1 = int(row_off_.size());
      for (int r = r0; r < r1; r += kRowsPerCall) work_.push_back({s, kvh, r, std::min(kRowsPerCall, r1 - r)});
    }
  split_long_walks();
}

// Decode of one or a few sequences gives fewer calls than threads (SmolLM2:
// 3 KV heads, so one of 2 threads would do two of the 3 walks). Then every
// walk is cut into parts of at least 2 blocks, up to kTasks calls in all
// (12 divides evenly over 2, 3, 4 or 6 threads). The parts depend on the
// batch only, never on the thread count, so the output bits do not either.
void ContiguousKv::split_long_walks() {
  constexpr int kTasks = 12, kMinBlocks = 2;
  const int n = int(work_.size());
  if (n >= kTasks || !block_head_dim(shape_.head_dim)) return;
  std::vector<Work> split;
  int slot = 0;
  for (const Work& w : work_) {
    int seen = 0;
    for (int r = w.r0; r < w.r0 + w.n; ++r) seen = std::max(seen, row_visible_[size_t(r)]);
    const int blocks = (seen + kDenseBlock - 1) / kDenseBlock;
    const int parts = std::min((kTasks + n - 1) / n, blocks / kMinBlocks);
    if (parts < 2) {
      split.push_back(w);
      continue;
    }
    splits_.push_back({int(split.size()), parts});
    for (int p = 0; p < parts; ++p) {
      Work part = w;
      part.b0 = blocks * p / parts;
      part.b1 = blocks * (p + 1) / parts;
      part.part = slot++;
      split.push_back(part);
    }
  }
  work_ = std::move(split);
  parts_.resize(size_t(slot) * part_floats());
}

// Part slot `slot` of parts_: o (64 x head_dim), then m (64), then l (64).
StateRef ContiguousKv::part_state(int slot) {
  float* o = parts_.data() + size_t(slot) * part_floats();
  float* m = o + size_t(kDenseBlock) * size_t(shape_.head_dim);
  return {o, m, m + kDenseBlock};
}

size_t ContiguousKv::part_floats() const { return size_t(kDenseBlock) * (size_t(shape_.head_dim) + 2); }

void ContiguousKv::store(int layer, const float* k, const float* v) {
  const int D = shape_.head_dim, w = shape_.kv_width();
  // Split as HostKvMemory::write_rows is: by (head, token), a head's tokens together.
  const int n = int(tok_seq_.size()), pairs = n * shape_.n_kv_heads;
#pragma omp parallel for schedule(static) if (pairs >= 64)
  for (int p = 0; p < pairs; ++p) {
    const int h = p / n;
    const size_t t = size_t(p % n);
    const float* kr = k + t * size_t(w) + size_t(h) * D;
    const float* vr = v + t * size_t(w) + size_t(h) * D;
    uint8_t* kt = k_slot(*tok_seq_[t], layer, tok_idx_[t], h);
    uint8_t* vt = v_slot(*tok_seq_[t], layer, tok_idx_[t], h);
    for (int x = 0; x < D; ++x) {
      store_kv_elem(kt + size_t(x) * kDenseBlock * es_, int(type_), kr[x]);
      store_kv_elem(vt + size_t(x) * es_, int(type_), vr[x]);
    }
  }
}

// A row at position p sees the keys at positions above p - window.
const int* ContiguousKv::window_first(int window) {
  if (window == win_) return row_first_.data();
  win_ = window;
  row_first_.resize(row_seq_.size());
  for (size_t r = 0; r < row_seq_.size(); ++r) {
    const std::vector<int32_t>& pos = row_seq_[r]->pos;  // the row's own key is its last visible one
    row_first_[r] = first_in_window(pos, pos[size_t(row_visible_[r] - 1)], window);
  }
  return row_first_.data();
}

void ContiguousKv::attend(int layer, const float* q, float* out, const LayerAttention& how) {
  const size_t d = size_t(shape_.head_dim);
  const int* first = how.window > 0 ? window_first(how.window) : nullptr;
  const float* sinks = how.sinks;
  // Each row's sink: its query head's (a row is one token's head).
  if (sinks) {
    row_sink_.resize(row_off_.size());
    for (size_t r = 0; r < row_off_.size(); ++r) row_sink_[r] = sinks[row_off_[r] / d % size_t(shape_.n_heads)];
  }
  const float* sink = sinks ? row_sink_.data() : nullptr;
  const int n = int(work_.size());
  // Later row slices of a prefill see more blocks: hand them out first.
#pragma omp parallel for schedule(dynamic) if (n > 1)
  for (int i = n - 1; i >= 0; --i) {
    const Work& w = work_[size_t(i)];
    const uint8_t* base = w.seq->kv[size_t(layer)].data() + size_t(w.kv_head) * head_bytes();
    const DenseBlocks kv{base, base + d * kDenseBlock * es_, block_bytes(), shape_.head_dim, int(type_)};
    const size_t* off = row_off_.data() + w.r0;
    const int* visible = row_visible_.data() + w.r0;
    if (w.part < 0) {
      attend_rows(q, out, off, first ? first + w.r0 : nullptr, visible, w.n, kv, sink ? sink + w.r0 : nullptr,
                  how.softcap);
      continue;
    }
    const StateRef p = part_state(w.part);
    attend_rows_part(q, off, first ? first + w.r0 : nullptr, visible, w.n, kv, w.b0, w.b1, p.o, p.m, p.l,
                     how.softcap);
  }
  // Fold each split walk's parts, in block order, into its first part.
  for (const Split& s : splits_) {
    const Work& w = work_[size_t(s.first)];
    const StateRef a = part_state(w.part);
    for (int p = 1; p < s.parts; ++p) {
      const StateRef b = part_state(work_[size_t(s.first + p)].part);
      for (int r = 0; r < w.n; ++r) merge({a.o + r * d, a.m + r, a.l + r}, b.o + r * d, b.m[r], b.l[r], int(d));
    }
    for (int r = 0; r < w.n; ++r)
      finalize(a.o + r * d, a.m[r], a.l[r], int(d), out + row_off_[size_t(w.r0 + r)],
               sink ? sink[w.r0 + r] : -INFINITY);
  }
}

}  // namespace cs
