#include "cache/prefix_kv.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <unordered_map>

#include "base/error.h"

namespace cs {

namespace {

// The layout, when the place can hold it: the GPU's kernels take head dims
// 64, 128 and 256 (checked before any memory is taken).
KvLayout placeable(KvLayout layout, KvPlace place) {
  const int d = layout.head_dim;
  if (place == KvPlace::kDevice && d != 64 && d != 128 && d != 256)
    throw Error("the GPU's attention runs head dims 64, 128 and 256, not " + std::to_string(d));
  return layout;
}

}  // namespace

PrefixKv::PrefixKv(KvLayout layout, size_t capacity_bytes, int n_heads, AttnPath path, bool retain, KvPlace place)
    : tree_(placeable(layout, place), capacity_bytes, retain, place), n_heads_(n_heads), path_(path) {
  if (place == KvPlace::kDevice) cuda_ = std::make_unique<CudaAttention>();
}

PrefixKv::~PrefixKv() = default;

KvStatus PrefixKv::join(SeqId id, std::span<const int32_t> tokens, int* matched) {
  const KvStatus st = tree_.join(id, tokens, matched);
  if (st.ok()) {
    std::vector<int32_t>& pos = pos_[id];
    pos.resize(size_t(*matched));
    std::iota(pos.begin(), pos.end(), 0);
  }
  return st;
}

KvStatus PrefixKv::join_detached(SeqId id) {
  const KvStatus st = tree_.join_detached(id);
  if (st.ok()) pos_[id].clear();
  return st;
}

KvStatus PrefixKv::attach(SeqId id, std::span<const ChunkId> chunks, std::span<const int32_t> positions) {
  size_t tokens = 0;
  for (ChunkId c : chunks) tokens += size_t(tree_.chunk_length(c));
  if (positions.size() != tokens)
    return {KvCode::kInvalid, "attach: " + std::to_string(positions.size()) + " positions for " +
                                  std::to_string(tokens) + " tokens"};
  const KvStatus st = tree_.attach_pinned(id, chunks);
  if (st.ok()) pos_[id].insert(pos_[id].end(), positions.begin(), positions.end());
  return st;
}

KvStatus PrefixKv::leave(SeqId id) {
  const KvStatus st = tree_.leave(id);
  if (st.ok()) pos_.erase(id);
  return st;
}

KvStatus PrefixKv::truncate(SeqId id, int n) {
  const KvStatus st = tree_.truncate(id, n);
  if (st.ok()) {
    std::vector<int32_t>& pos = pos_[id];
    pos.resize(std::min(pos.size(), size_t(n)));
  }
  return st;
}

KvStatus PrefixKv::fork(SeqId parent, SeqId child) {
  const KvStatus st = tree_.fork(parent, child);
  if (st.ok()) pos_[child] = pos_[parent];
  return st;
}

void PrefixKv::group(const Batch& batch, std::vector<SeqTokens>& out) const {
  out.clear();
  for (int t = 0; t < batch.size(); ++t) {
    const SeqId id = batch.seq[size_t(t)];
    // A sequence's tokens are usually adjacent: look at the last group first.
    auto it = !out.empty() && out.back().id == id
                  ? out.end() - 1
                  : std::find_if(out.begin(), out.end(), [id](const SeqTokens& g) { return g.id == id; });
    if (it == out.end()) it = out.insert(out.end(), SeqTokens{id, {}});
    it->tokens.push_back(batch.tokens[size_t(t)]);
  }
}

int PrefixKv::chunks_needed(const Batch& batch) const {
  std::vector<SeqTokens> g;
  group(batch, g);
  int need = 0;
  for (const auto& s : g) need += tree_.chunks_to_append(s.id, int(s.tokens.size()));
  return need;
}

void PrefixKv::begin_batch(const Batch& batch) {
  // Check everything first so a failing batch changes nothing.
  group(batch, groups_);
  int need = 0;
  for (const auto& s : groups_) {
    if (!tree_.contains(s.id))
      throw KvError({KvCode::kUnknownSequence, "batch names sequence " + std::to_string(s.id) + ", which has not joined"});
    need += tree_.chunks_to_append(s.id, int(s.tokens.size()));
  }
  if (need > tree_.available())
    throw KvError({KvCode::kPoolExhausted, "KV pool full: the batch needs " + std::to_string(need) + " chunks, " +
                                               std::to_string(tree_.available()) + " available"});
  std::unordered_map<SeqId, int> next;  // per sequence: index of its next batch token
  for (const auto& s : groups_) {
    next[s.id] = tree_.length(s.id);
    const KvStatus st = tree_.append(s.id, s.tokens);
    if (!st.ok()) throw KvError(st);
  }
  slot_.clear();
  const int c = chunk_size();
  for (SeqId id : batch.seq) {
    const auto [chunk, off] = tree_.slot(id, next[id]++);
    slot_.push_back(chunk * c + off);
  }
  for (int t = 0; t < batch.size(); ++t) pos_[batch.seq[size_t(t)]].push_back(batch.pos[size_t(t)]);

  // The kernels take query rows grouped by sequence in context order.
  const auto ctx = tree_.context();
  std::unordered_map<SeqId, int> index;
  for (size_t i = 0; i < ctx->seqs.size(); ++i) index[ctx->seqs[i]] = int(i);
  std::vector<int> q_begin(ctx->seqs.size() + 1, 0);
  for (SeqId id : batch.seq) ++q_begin[size_t(index.at(id)) + 1];
  for (size_t i = 1; i < q_begin.size(); ++i) q_begin[i] += q_begin[i - 1];
  std::vector<int> fill(q_begin.begin(), q_begin.end() - 1);
  row_of_tok_.clear();
  for (SeqId id : batch.seq) row_of_tok_.push_back(fill[size_t(index.at(id))]++);
  plan_ = plan_attention(tree_.plan_input(), std::move(q_begin), n_heads_);
  win_ = 0;
  if (!on_device()) return;
  // The GPU's copy of the batch: tiles, slots and row orders, once for every layer.
  tiles_ = plan_tiles(plan_, path_);
  cuda_->set_plan(tiles_);
  const size_t n = row_of_tok_.size();
  std::vector<int32_t> tok_of_row(n);
  for (size_t t = 0; t < n; ++t) tok_of_row[size_t(row_of_tok_[t])] = int32_t(t);
  static_assert(std::is_same_v<int, int32_t>, "row_of_tok_ goes over as it is");
  auto upload = [](cuda::Buffer& buf, const std::vector<int32_t>& v) {
    buf.reserve(std::max<size_t>(v.size(), 1) * sizeof(int32_t));
    cuda::to_device(buf.get(), v.data(), v.size() * sizeof(int32_t));
  };
  upload(dev_slot_, slot_);
  upload(dev_tok_of_row_, tok_of_row);
  upload(dev_row_of_tok_, row_of_tok_);
  dev_win_ = -1;
}

// A row at position p sees the keys at positions above p - window: in a
// sequence's increasing positions, those from the first such key on.
const int* PrefixKv::window_first(int window) {
  if (window == win_) return win_first_.data();
  win_ = window;
  win_first_.resize(row_of_tok_.size());
  for (int i = 0; i < plan_.n_seqs(); ++i) {
    const int n = plan_.rows_of(i);
    if (n == 0) continue;
    // Its k-th of n rows is key len - n + k (this batch's keys are its last).
    const std::vector<int32_t>& pos = pos_.at(plan_.seqs[size_t(i)]);
    const int len = plan_.seq_len[size_t(i)];
    for (int k = 0; k < n; ++k)
      win_first_[size_t(plan_.rows_begin(i) + k)] = first_in_window(pos, pos[size_t(len - n + k)], window);
  }
  return win_first_.data();
}

void PrefixKv::store(int layer, const float* k, const float* v) {
  tree_.memory().write_rows(layer, on_device() ? dev_slot_.as<int32_t>() : slot_.data(), int(slot_.size()), k, v);
}

TreeView PrefixKv::view(int max_nodes, int head_tokens) const {
  if (!staging_) return tree_.view(max_nodes, head_tokens);
  const DiskStaging& d = *staging_;
  return tree_.view(max_nodes, head_tokens, [&d](ChunkId c) { return d.on_disk(c); });
}

void PrefixKv::read_kv(SeqId id, int index, int layer, int head, float* k, float* v) const {
  if (!tree_.host()) throw Error("read_kv: this KV is on the GPU");
  const auto [chunk, off] = tree_.slot(id, index);
  tree_.host()->read_kv(chunk, off, layer, head, k, v);
}

// On the GPU: the rows put in context order, the tiles of the batch's plan
// run (attn/cuda_attention.h), the rows put back in batch order.
void PrefixKv::attend_on_device(int layer, const float* q, float* out, const LayerAttention& how) {
  if (how.sinks) throw Error("attention sinks (gpt-oss) do not run on the GPU yet: keep this model's KV on the host");
  if (how.softcap != 0.0f)
    throw Error("attention logit soft-capping (Gemma 2) does not run on the GPU yet: keep this model's KV on the host");
  const int window = how.window;
  const int n = int(row_of_tok_.size());
  if (n == 0) return;
  const size_t w = size_t(n_heads_) * size_t(tree_.layout().head_dim);
  dev_q_.reserve(size_t(n) * w * sizeof(float));
  dev_out_.reserve(size_t(n) * w * sizeof(float));
  cuda::gather_rows(q, int64_t(w), dev_tok_of_row_.as<int32_t>(), n, dev_q_.as<float>());
  const int32_t* first = nullptr;
  if (window > 0) {
    if (dev_win_ != window) {
      const int* h = window_first(window);
      dev_win_first_.reserve(size_t(n) * sizeof(int32_t));
      cuda::to_device(dev_win_first_.get(), h, size_t(n) * sizeof(int32_t));
      dev_win_ = window;
    }
    first = dev_win_first_.as<int32_t>();
  }
  cuda_->run(*tree_.device(), layer, dev_q_.as<float>(), dev_out_.as<float>(), first);
  cuda::gather_rows(dev_out_.as<float>(), int64_t(w), dev_row_of_tok_.as<int32_t>(), n, out);
}

void PrefixKv::attend(int layer, const float* q, float* out, const LayerAttention& how) {
  if (on_device()) return attend_on_device(layer, q, out, how);
  const size_t w = size_t(n_heads_) * tree_.layout().head_dim;
  q_.resize(row_of_tok_.size() * w);
  out_.resize(q_.size());
  for (size_t t = 0; t < row_of_tok_.size(); ++t)
    std::memcpy(q_.data() + size_t(row_of_tok_[t]) * w, q + t * w, w * 4);
  const AttnProblem p{&tree_.host()->pool(), &plan_, layer, q_.data(), out_.data(), &ws_,
                      how.window > 0 ? window_first(how.window) : nullptr, how.sinks, how.softcap};
  switch (path_) {
    case AttnPath::kPerSequence: attn_per_sequence(p); break;
    case AttnPath::kTpp: attn_tpp(p); break;
    case AttnPath::kRelay: attn_relay(p); break;
  }
  for (size_t t = 0; t < row_of_tok_.size(); ++t)
    std::memcpy(out + t * w, out_.data() + size_t(row_of_tok_[t]) * w, w * 4);
}

void PrefixKv::attach_disk(DiskTier* disk) {
  staging_.reset();
  if (disk) staging_ = std::make_unique<DiskStaging>(tree_, tree_.memory(), *disk);
}

SequenceCache::Prep PrefixKv::prepare(SeqId id, std::span<const int32_t> known, int room, int* from_disk) {
  if (staging_) return staging_->prepare(id, known, room, from_disk);
  *from_disk = 0;
  return Prep::kReady;
}

void PrefixKv::forget(SeqId id) {
  if (staging_) staging_->forget(id);
}

void PrefixKv::take_loads() {
  if (staging_) staging_->take_loads();
}

void PrefixKv::persist_all() {
  if (staging_) staging_->persist_all();
}

}  // namespace cs
