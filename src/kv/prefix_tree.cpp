#include "kv/prefix_tree.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kv/block_ledger.h"

namespace cs {

int KernelContext::index_of(SeqId id) const {
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i] == id) return int(i);
  return -1;
}

PrefixTree::PrefixTree(KvLayout layout, size_t capacity_bytes, bool retain)
    : layout_(layout), ids_(layout.chunks_in(capacity_bytes)), retain_(retain) {
  meta_.resize(size_t(ids_.capacity()));
  evict_key_.assign(size_t(ids_.capacity()), 0);
}

void PrefixTree::observe(TreeObserver* o) {
  if (o && std::find(observers_.begin(), observers_.end(), o) == observers_.end()) observers_.push_back(o);
}

void PrefixTree::unobserve(TreeObserver* o) { std::erase(observers_, o); }

void PrefixTree::check_writer() {
#if !defined(NDEBUG) || defined(CHUNKSERVE_DEBUG_CHECKS)
  const auto me = std::this_thread::get_id();
  if (writer_ == std::thread::id{}) writer_ = me;
  if (writer_ != me) {
    std::fprintf(stderr, "PrefixTree: mutated from a second thread (single-writer rule)\n");
    std::abort();
  }
#endif
}

KvStats PrefixTree::stats() const {
  KvStats s;
  s.chunks = ids_.capacity();
  s.free = ids_.free_count();
  s.peak = ids_.peak_used();
  s.bytes = size_t(ids_.capacity()) * layout().chunk_bytes();
  s.chunk_bytes = layout().chunk_bytes();
  s.cached = cached_;
  s.pinned = pinned_;
  s.evicted = evicted_;
  s.used = ids_.used_count() - cached_ - pinned_;
  return s;
}

int PrefixTree::length(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second.length;
}

const std::vector<ChunkId>& PrefixTree::chunks_of(SeqId id) const {
  static const std::vector<ChunkId> none;
  auto it = seqs_.find(id);
  return it == seqs_.end() ? none : it->second.chunks;
}

void PrefixTree::touch(ChunkId c) { meta_[size_t(c)].last_used = ++clock_; }

void PrefixTree::add_ref(ChunkId c) {
  if (meta_[size_t(c)].ref++ == 0 && !meta_[size_t(c)].pinned) {
    --cached_;  // a retained chunk back in use
    update_evictable(c);
  }
}

// Keeps evictable_ equal to the set of unreferenced leaves, keyed by the time
// they were last released (last_used is never 0 for an allocated chunk).
void PrefixTree::update_evictable(ChunkId c) {
  if (c < 0) return;
  const Chunk& m = meta_[size_t(c)];
  const bool should = m.ref == 0 && m.children.empty();
  uint64_t& key = evict_key_[size_t(c)];
  if (key && (!should || key != m.last_used)) {
    evictable_.erase({key, c});
    key = 0;
  }
  if (should && !key) {
    key = m.last_used;
    evictable_.insert({key, c});
  }
}

ChunkId PrefixTree::allocate_chunk() {
  ChunkId id = ids_.allocate();
  if (id < 0 && evict(1) == 1) id = ids_.allocate();
  if (id >= 0) {
    Chunk& m = meta_[size_t(id)];
    m = Chunk{};
    m.tokens.reserve(size_t(layout().chunk_size));
    m.last_used = ++clock_;
  }
  return id;
}

void PrefixTree::attach(ChunkId c, ChunkId parent) {
  meta_[size_t(c)].in_tree = true;
  meta_[size_t(c)].parent = parent;
  children_of(parent).push_back(c);
  update_evictable(parent);
}

void PrefixTree::detach_and_free(ChunkId c) {
  const bool in_tree = meta_[size_t(c)].in_tree;
  const ChunkId parent = meta_[size_t(c)].parent;
  if (in_tree) tell([c](TreeObserver& o) { o.removed(c); });
  if (in_tree) {
    auto& siblings = children_of(parent);
    siblings.erase(std::find(siblings.begin(), siblings.end(), c));
  }
  if (uint64_t& key = evict_key_[size_t(c)]) {
    evictable_.erase({key, c});
    key = 0;
  }
  if (meta_[size_t(c)].ref == 0) --cached_;
  meta_[size_t(c)] = Chunk{};
  ids_.release(c);
  if (in_tree) update_evictable(parent);
}

void PrefixTree::unref(ChunkId c) {
  Chunk& m = meta_[size_t(c)];
  if (--m.ref > 0 || m.pinned) return;  // a pinned chunk stays until unpin
  ++cached_;  // every unreferenced chunk in the tree counts as cached
  // A partially filled chunk is kept too: a later prompt that matches part of
  // it copies those tokens' K/V instead of computing them. A detached
  // sequence's own chunk is found by no join: freed.
  if (m.in_tree && (retain_ || !m.children.empty())) {  // kept: a retained prefix
    touch(c);
    update_evictable(c);
  } else {
    detach_and_free(c);
  }
}

int PrefixTree::evict(int n) {
  int freed = 0;
  while (freed < n && !evictable_.empty()) {
    const ChunkId c = evictable_.begin()->second;
    tell([c](TreeObserver& o) { o.evicting(c); });
    detach_and_free(c);
    ++freed;
    ++evicted_;
  }
  return freed;
}

void PrefixTree::grown(ChunkId c, int before) {
  const Chunk& m = meta_[size_t(c)];
  if (!m.in_tree) return;
  tell([&](TreeObserver& o) { o.grown(c, m.parent, m.tokens, before); });
}

std::vector<int32_t> PrefixTree::continuation(std::span<const int32_t> tokens, int k) const {
  std::vector<int32_t> out;
  if (k <= 0) return out;
  const int c = layout().chunk_size;
  const auto [node, i] = match(tokens);
  const std::span<const int32_t> rest = tokens.subspan(size_t(i));
  // A chunk under `node` holding the rest and more.
  ChunkId at = kNoChunk;
  for (ChunkId ch : children_of(node)) {
    const auto& t = meta_[size_t(ch)].tokens;
    if (t.size() > rest.size() && std::equal(rest.begin(), rest.end(), t.begin())) {
      at = ch;
      break;
    }
  }
  size_t from = rest.size();
  while (at != kNoChunk && int(out.size()) < k) {
    const auto& t = meta_[size_t(at)].tokens;
    for (size_t j = from; j < t.size() && int(out.size()) < k; ++j) out.push_back(t[j]);
    if (int(t.size()) < c || meta_[size_t(at)].children.empty()) break;
    at = meta_[size_t(at)].children.front();
    from = 0;
  }
  return out;
}

std::pair<ChunkId, int> PrefixTree::match(std::span<const int32_t> tokens) const {
  const int c = layout().chunk_size, n = int(tokens.size());
  ChunkId node = kNoChunk;
  int i = 0;
  while (i + c <= n) {
    ChunkId next = kNoChunk;
    for (ChunkId ch : children_of(node)) {
      const auto& t = meta_[size_t(ch)].tokens;
      if (int(t.size()) == c && std::equal(t.begin(), t.end(), tokens.begin() + i)) {
        next = ch;
        break;
      }
    }
    if (next < 0) break;
    node = next;
    i += c;
  }
  return {node, i};
}

std::pair<ChunkId, bool> PrefixTree::adopt(ChunkId parent, std::span<const int32_t> tokens) {
  check_writer();
  const int c = layout().chunk_size;
  if (int(tokens.size()) != c) return {kNoChunk, false};
  if (parent >= 0 && (!meta_[size_t(parent)].in_tree || chunk_length(parent) != c)) return {kNoChunk, false};
  for (ChunkId ch : children_of(parent)) {
    const auto& t = meta_[size_t(ch)].tokens;
    if (int(t.size()) == c && std::equal(t.begin(), t.end(), tokens.begin())) return {ch, false};  // already here
  }
  if (parent >= 0) add_ref(parent);  // making room must not evict the parent
  const ChunkId got = allocate_chunk();
  if (got >= 0) {
    meta_[size_t(got)].tokens.assign(tokens.begin(), tokens.end());
    attach(got, parent);
    grown(got, 0);
    ++cached_;  // retained: in the tree, no reader yet
    update_evictable(got);
  }
  if (parent >= 0) unref(parent);
  return {got, got >= 0};
}

void PrefixTree::copy_tokens(ChunkId dst, ChunkId src, int n) {
  copies_.push_back({src, dst, n});
  auto& t = meta_[size_t(src)].tokens;
  meta_[size_t(dst)].tokens.assign(t.begin(), t.begin() + n);
}

// A copy queued by an earlier call must be made before this one may
// allocate (and so reuse its source's id).
static void check_copies_taken(const std::vector<PrefixTree::KvCopy>& q) {
#if !defined(NDEBUG) || defined(CHUNKSERVE_DEBUG_CHECKS)
  if (!q.empty()) {
    std::fprintf(stderr, "PrefixTree: a queued K/V copy was not taken before the next call\n");
    std::abort();
  }
#else
  (void)q;
#endif
}

// ChunkAttention §3.1: a new sequence walks the tree along its prompt.
KvStatus PrefixTree::join(SeqId id, std::span<const int32_t> tokens, int* matched) {
  check_writer();
  check_copies_taken(copies_);
  if (seqs_.count(id)) return {KvCode::kSequenceExists, "sequence " + std::to_string(id) + " exists"};
  const int n = int(tokens.size());
  const auto [node, i] = match(tokens);
  std::vector<ChunkId> path;
  for (ChunkId p = node; p >= 0; p = meta_[size_t(p)].parent) path.push_back(p);
  std::reverse(path.begin(), path.end());
  // The longest partial match among the children of where the walk stopped.
  ChunkId best = kNoChunk;
  int best_m = 0;
  for (ChunkId ch : children_of(node)) {
    const auto& t = meta_[size_t(ch)].tokens;
    const int lim = std::min(int(t.size()), n - i);
    int m = 0;
    while (m < lim && t[size_t(m)] == tokens[size_t(i + m)]) ++m;
    if (m > best_m) best = ch, best_m = m;
  }
  for (ChunkId ch : path) {
    add_ref(ch);
    if (++meta_[size_t(ch)].uses == 2) tell([ch](TreeObserver& o) { o.shared(ch); });
  }
  Seq seq;
  seq.chunks = path;
  seq.length = i;
  if (best_m > 0) {
    add_ref(best);  // pin the source so making room cannot evict it
    const ChunkId own = allocate_chunk();
    if (own >= 0) {
      copy_tokens(own, best, best_m);
      ++meta_[size_t(best)].uses;  // its tokens served this sequence too
      attach(own, node);
      grown(own, 0);
      meta_[size_t(own)].ref = meta_[size_t(own)].uses = 1;
      seq.chunks.push_back(own);
      seq.length += best_m;
    }
    unref(best);
    if (own < 0) {
      for (auto it = path.rbegin(); it != path.rend(); ++it) unref(*it);
      return {KvCode::kPoolExhausted, "no free chunk to copy a partial prefix into"};
    }
  }
  *matched = seq.length;
  seqs_.emplace(id, std::move(seq));
  left_.erase(id);
  dirty_ = true;
  return KvStatus::Ok();
}

KvStatus PrefixTree::not_live(SeqId id, const char* what) const {
  return {left_.count(id) ? KvCode::kSequenceLeft : KvCode::kUnknownSequence,
          std::string(what) + " of sequence " + std::to_string(id) + " that is not live" +
              (left_.count(id) ? " (it left)" : "")};
}

void PrefixTree::copy_tail(Seq& seq, int n) {
  const ChunkId tail = seq.chunks.back(), own = allocate_chunk();
  copy_tokens(own, tail, n);
  if (!seq.detached) attach(own, meta_[size_t(tail)].parent);
  grown(own, 0);
  meta_[size_t(own)].ref = meta_[size_t(own)].uses = 1;
  seq.chunks.back() = own;
  unref(tail);  // still read by the other sequences, or kept as its whole self
  dirty_ = true;
}

void PrefixTree::release(std::span<const ChunkId> chunks) {
  for (auto c = chunks.rbegin(); c != chunks.rend(); ++c) unref(*c);  // leaves first
  // Now retained: kept root first, so that a kill part-way through the
  // writes leaves a prefix of the chain on disk (a tail alone serves nobody).
  for (ChunkId c : chunks)
    if (meta_[size_t(c)].ref == 0 && meta_[size_t(c)].in_tree) tell([c](TreeObserver& o) { o.retained(c); });
  dirty_ = true;
}

KvStatus PrefixTree::append(SeqId id, std::span<const int32_t> tokens) {
  check_writer();
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return not_live(id, "append");
  check_copies_taken(copies_);
  Seq& seq = it->second;
  const int c = layout().chunk_size, n = int(tokens.size());
  if (n == 0) return KvStatus::Ok();
  const ChunkId tail = seq.chunks.empty() ? kNoChunk : seq.chunks.back();
  // A forked partial tail is copied before it is written; a pinned one is
  // never written (the appended tokens start a fresh chunk).
  const bool cow = tail != kNoChunk && chunk_length(tail) < c && meta_[size_t(tail)].ref > 1 && !meta_[size_t(tail)].pinned;
  const int need = chunks_to_append(id, n);
  if (need > available())
    return {KvCode::kPoolExhausted, "need " + std::to_string(need) + " chunks, " +
                                        std::to_string(available()) + " available"};
  if (cow) copy_tail(seq, chunk_length(tail));
  // The observer hears of each chunk once, when the tokens for it are in.
  ChunkId growing = seq.chunks.empty() ? kNoChunk : seq.chunks.back();
  int before = growing < 0 ? 0 : chunk_length(growing);
  for (int32_t t : tokens) {
    ChunkId last = seq.chunks.empty() ? kNoChunk : seq.chunks.back();
    if (last < 0 || chunk_length(last) == c || meta_[size_t(last)].pinned) {
      if (growing >= 0 && chunk_length(growing) > before) grown(growing, before);
      const ChunkId fresh = allocate_chunk();  // cannot fail: counted above
      if (!seq.detached) attach(fresh, last);
      meta_[size_t(fresh)].ref = meta_[size_t(fresh)].uses = 1;
      seq.chunks.push_back(fresh);
      last = fresh;
      growing = fresh, before = 0;
      dirty_ = true;
    }
    meta_[size_t(last)].tokens.push_back(t);
    ++seq.length;
  }
  if (growing >= 0 && chunk_length(growing) > before) grown(growing, before);
  return KvStatus::Ok();
}

std::vector<PrefixTree::TreeChunk> PrefixTree::tree_chunks() const {
  std::vector<TreeChunk> out;
  std::vector<ChunkId> todo(root_children_.rbegin(), root_children_.rend());
  while (!todo.empty()) {
    const ChunkId c = todo.back();
    todo.pop_back();
    const Chunk& m = meta_[size_t(c)];
    out.push_back({c, m.parent, m.tokens});
    todo.insert(todo.end(), m.children.rbegin(), m.children.rend());
  }
  return out;
}

std::vector<uint64_t> PrefixTree::block_hashes(int block) const {
  std::unordered_map<ChunkId, std::optional<uint64_t>> last;  // a chunk's last block
  std::set<uint64_t> out;
  for (const TreeChunk& c : tree_chunks()) {
    std::optional<uint64_t> prev = c.parent == kNoChunk ? std::nullopt : last[c.parent];
    for (size_t b = 0; b + size_t(block) <= c.tokens.size(); b += size_t(block)) {
      prev = block_hash(prev, c.tokens.subspan(b, size_t(block)));
      out.insert(*prev);
    }
    last[c.id] = prev;
  }
  return {out.begin(), out.end()};
}

int PrefixTree::chunks_to_append(SeqId id, int n) const {
  auto it = seqs_.find(id);
  const std::vector<ChunkId> none;
  const auto& chunks = it == seqs_.end() ? none : it->second.chunks;
  const int c = layout().chunk_size;
  const ChunkId tail = chunks.empty() ? kNoChunk : chunks.back();
  // A pinned chunk is never written: appending after one starts a fresh chunk.
  const int room = tail == kNoChunk || meta_[size_t(tail)].pinned ? 0 : c - chunk_length(tail);
  const bool cow = n > 0 && room > 0 && meta_[size_t(tail)].ref > 1;
  return (std::max(0, n - room) + c - 1) / c + (cow ? 1 : 0);
}

KvStatus PrefixTree::leave(SeqId id) {
  check_writer();
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return not_live(id, "leave");
  const std::vector<ChunkId> chunks = std::move(it->second.chunks);
  seqs_.erase(it);
  left_.insert(id);
  release(chunks);
  return KvStatus::Ok();
}

KvStatus PrefixTree::truncate(SeqId id, int n) {
  check_writer();
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return not_live(id, "truncate");
  Seq& seq = it->second;
  if (n < 0 || n > seq.length)
    return {KvCode::kInvalid, "truncate of sequence " + std::to_string(id) + " to " + std::to_string(n) +
                                  " tokens; it has " + std::to_string(seq.length)};
  check_copies_taken(copies_);
  if (n == seq.length) return KvStatus::Ok();
  // The chunk the cut falls in, and whether it is shortened or let go whole.
  int len = seq.length;
  size_t keep_chunks = seq.chunks.size();
  while (keep_chunks > 0 && len - chunk_length(seq.chunks[keep_chunks - 1]) >= n)
    len -= chunk_length(seq.chunks[--keep_chunks]);
  const int keep = keep_chunks > 0 ? n - (len - chunk_length(seq.chunks[keep_chunks - 1])) : 0;
  const ChunkId cut = keep_chunks > 0 ? seq.chunks[keep_chunks - 1] : kNoChunk;
  const bool partial = cut != kNoChunk && keep < chunk_length(cut);
  if (partial && meta_[size_t(cut)].pinned)
    return {KvCode::kInvalid, "truncate of sequence " + std::to_string(id) + " inside a pinned chunk"};
  // A copy needs a chunk; the chunks let go below are not counted (they may
  // stay, cached under the cut one), so ask before changing anything.
  if (partial && meta_[size_t(cut)].ref > 1 && available() < 1)
    return {KvCode::kPoolExhausted, "truncate needs 1 chunk, 0 available"};
  std::vector<ChunkId> gone(seq.chunks.begin() + std::ptrdiff_t(keep_chunks), seq.chunks.end());
  seq.chunks.resize(keep_chunks);
  seq.length = n;
  release(gone);
  // Shortened in place only when nothing hangs under it (the chunks just let
  // go may stay there, cached; being cached, they leave room for the copy).
  const bool own = partial && meta_[size_t(cut)].ref == 1 && meta_[size_t(cut)].children.empty();
  if (own) {
    Chunk& m = meta_[size_t(cut)];
    if (m.in_tree) tell([cut](TreeObserver& o) { o.removed(cut); });
    m.tokens.resize(size_t(keep));
    grown(cut, 0);
  } else if (partial) {
    copy_tail(seq, keep);
  }
  dirty_ = true;
  return KvStatus::Ok();
}

KvStatus PrefixTree::fork(SeqId parent, SeqId child) {
  check_writer();
  auto it = seqs_.find(parent);
  if (it == seqs_.end()) return not_live(parent, "fork");
  if (seqs_.count(child)) return {KvCode::kSequenceExists, "sequence " + std::to_string(child) + " exists"};
  Seq copy = it->second;
  for (ChunkId c : copy.chunks) add_ref(c), ++meta_[size_t(c)].uses;
  seqs_.emplace(child, std::move(copy));
  left_.erase(child);
  dirty_ = true;
  return KvStatus::Ok();
}

// Walks back from the tail (where appends write) over the chunks' lengths:
// chunks may be partially filled anywhere in a detached sequence's list.
std::pair<ChunkId, int> PrefixTree::slot(SeqId id, int index) const {
  const Seq& s = seqs_.at(id);
  int start = s.length;
  for (auto c = s.chunks.rbegin(); c != s.chunks.rend(); ++c) {
    start -= chunk_length(*c);
    if (index >= start) return {*c, index - start};
  }
  throw Error("slot: token " + std::to_string(index) + " of sequence " + std::to_string(id) + " is not cached");
}

ChunkId PrefixTree::pin(std::span<const int32_t> tokens, uint64_t group) {
  check_writer();
  if (tokens.empty() || int(tokens.size()) > layout().chunk_size || group == 0) return kNoChunk;
  const ChunkId c = allocate_chunk();
  if (c < 0) return kNoChunk;
  meta_[size_t(c)].pinned = true;
  meta_[size_t(c)].group = group;
  meta_[size_t(c)].group_pos = group_size_[group]++;
  meta_[size_t(c)].tokens.assign(tokens.begin(), tokens.end());
  ++pinned_;
  return c;
}

KvStatus PrefixTree::unpin(ChunkId c) {
  check_writer();
  if (!pinned(c)) return {KvCode::kInvalid, "chunk " + std::to_string(c) + " is not pinned"};
  if (meta_[size_t(c)].ref > 0)
    return {KvCode::kInUse, "chunk " + std::to_string(c) + " is read by " + std::to_string(meta_[size_t(c)].ref) +
                                " live sequences"};
  if (--group_size_[meta_[size_t(c)].group] == 0) group_size_.erase(meta_[size_t(c)].group);
  meta_[size_t(c)] = Chunk{};
  ids_.release(c);
  --pinned_;
  return KvStatus::Ok();
}

KvStatus PrefixTree::join_detached(SeqId id) {
  check_writer();
  if (seqs_.count(id)) return {KvCode::kSequenceExists, "sequence " + std::to_string(id) + " exists"};
  Seq s;
  s.detached = true;
  seqs_.emplace(id, std::move(s));
  left_.erase(id);
  dirty_ = true;
  return KvStatus::Ok();
}

KvStatus PrefixTree::attach_pinned(SeqId id, std::span<const ChunkId> chunks) {
  check_writer();
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.detached)
    return {KvCode::kInvalid, "attach to sequence " + std::to_string(id) + ", which is not a live detached one"};
  for (ChunkId c : chunks)
    if (!pinned(c)) return {KvCode::kInvalid, "chunk " + std::to_string(c) + " is not pinned"};
  for (ChunkId c : chunks) {
    add_ref(c);
    ++meta_[size_t(c)].uses;
    it->second.chunks.push_back(c);
    it->second.length += chunk_length(c);
  }
  dirty_ = true;
  return KvStatus::Ok();
}

PlanInput PrefixTree::plan_input() { return plan_input(context()); }

PlanInput PrefixTree::plan_input(std::shared_ptr<const KernelContext> ctx) const {
  PlanInput in;
  in.layout = layout();
  in.ctx = std::move(ctx);
  const KernelContext& c = *in.ctx;
  in.seq_len.reserve(c.seqs.size());
  for (SeqId id : c.seqs) in.seq_len.push_back(length(id));
  in.chunk_len.reserve(c.chunks.size());
  in.chunk_group.reserve(c.chunks.size());
  for (ChunkId ch : c.chunks) {
    in.chunk_len.push_back(chunk_length(ch));
    in.chunk_group.push_back(pinned(ch) ? pin_group(ch) : 0);
  }
  return in;
}

// ChunkAttention §3.3: order sequences by a depth-first walk of the tree, so
// each prefix's readers form one contiguous index range; then list every chunk
// more than one sequence reads, with its readers and their depths.
std::shared_ptr<const KernelContext> PrefixTree::context() {
  if (!dirty_ && context_) return context_;
  check_writer();
  auto ctx = std::make_shared<KernelContext>();
  ctx->version = ++version_;
  std::unordered_map<ChunkId, std::vector<SeqId>> ending;
  std::vector<SeqId> detached;  // outside the tree: after the walk
  for (const auto& [id, s] : seqs_) {
    if (s.detached) detached.push_back(id);
    else ending[s.chunks.empty() ? kNoChunk : s.chunks.back()].push_back(id);
  }
  for (auto& [c, ids] : ending) std::sort(ids.begin(), ids.end());
  std::sort(detached.begin(), detached.end());

  struct Frame {
    ChunkId node;
    size_t next_child;
  };
  std::vector<Frame> stack;
  auto enter = [&](ChunkId node) {
    if (auto e = ending.find(node); e != ending.end())
      ctx->seqs.insert(ctx->seqs.end(), e->second.begin(), e->second.end());
    stack.push_back({node, 0});
  };
  enter(kNoChunk);
  while (!stack.empty()) {
    Frame& f = stack.back();
    const auto& kids = children_of(f.node);
    while (f.next_child < kids.size() && meta_[size_t(kids[f.next_child])].ref == 0) ++f.next_child;
    if (f.next_child < kids.size()) {
      enter(kids[f.next_child++]);
      continue;
    }
    stack.pop_back();
  }
  ctx->seqs.insert(ctx->seqs.end(), detached.begin(), detached.end());
  std::unordered_map<ChunkId, size_t> shared_index;
  for (int i = 0; i < int(ctx->seqs.size()); ++i) {
    const Seq& s = seqs_.at(ctx->seqs[size_t(i)]);
    ctx->chunk_begin.push_back(int(ctx->chunks.size()));
    int p = 0;
    while (p < int(s.chunks.size()) && meta_[size_t(s.chunks[size_t(p)])].ref > 1) ++p;
    ctx->private_from.push_back(p);
    ctx->chunks.insert(ctx->chunks.end(), s.chunks.begin(), s.chunks.end());
    for (int d = 0; d < int(s.chunks.size()); ++d) {
      const ChunkId c = s.chunks[size_t(d)];
      if (meta_[size_t(c)].ref < 2) continue;
      auto [it, fresh] = shared_index.emplace(c, ctx->shared.size());
      if (fresh) ctx->shared.push_back({c, {}, {}});
      ctx->shared[it->second].readers.push_back(i);
      ctx->shared[it->second].depth.push_back(d);
    }
  }
  ctx->chunk_begin.push_back(int(ctx->chunks.size()));
  // A chunk's first reader and its depth there name it uniquely (a sequence
  // has one chunk per depth): sorting by them puts runs in order.
  std::sort(ctx->shared.begin(), ctx->shared.end(), [](const SharedChunk& a, const SharedChunk& b) {
    return a.readers[0] != b.readers[0] ? a.readers[0] < b.readers[0] : a.depth[0] < b.depth[0];
  });
  context_ = std::move(ctx);
  dirty_ = false;
  return context_;
}

}  // namespace cs
