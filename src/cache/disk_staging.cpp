#include "cache/disk_staging.h"

namespace cs {

DiskStaging::DiskStaging(PrefixTree& tree, KvMemory& memory, DiskTier& disk)
    : tree_(tree), memory_(memory), disk_(disk), keys_(size_t(tree.capacity())), keyed_(size_t(tree.capacity()), 0) {
  // Parents come first: each key chains from its parent's.
  for (const PrefixTree::TreeChunk& t : tree_.tree_chunks()) grown(t.id, t.parent, t.tokens, int(t.tokens.size()));
  tree_.observe(this);
}

DiskStaging::~DiskStaging() { tree_.unobserve(this); }

// In-tree parents are full (a partial chunk grows before it has children),
// so they are named before their children.
void DiskStaging::grown(ChunkId c, ChunkId parent, std::span<const int32_t> tokens, int) {
  if (keyed_[size_t(c)] || int(tokens.size()) != tree_.layout().chunk_size) return;
  keys_[size_t(c)] = chunk_key(key_of(parent), tokens);
  keyed_[size_t(c)] = true;
}

void DiskStaging::persist(ChunkId c) {
  if (!keyed_[size_t(c)]) return;
  const ChunkId parent = tree_.parent(c);
  const auto& tokens = tree_.chunk_tokens(c);
  const DiskWant w{keys_[size_t(c)], key_of(parent), {tokens.begin(), tokens.end()}};
  disk_.store(w, memory_.layout().chunk_bytes(), [&](uint8_t* to) { memory_.read_chunk(c, to); }, wait_);
}

void DiskStaging::persist_all() {
  wait_ = true;
  for (const PrefixTree::TreeChunk& t : tree_.tree_chunks()) persist(t.id);
  wait_ = false;
}

SequenceCache::Prep DiskStaging::prepare(SeqId id, std::span<const int32_t> known, int room, int* from_disk) {
  using Prep = SequenceCache::Prep;
  *from_disk = 0;
  const int c = tree_.layout().chunk_size;
  auto [node, i] = tree_.match(known);
  if (auto it = loads_.find(id); it != loads_.end()) {
    Load& l = it->second;
    if (!l.done) return Prep::kLoading;
    // The tree may have changed while it read: adopt from where it ends now.
    const int skip = (i - l.start) / c;
    if (i < l.start || (i - l.start) % c != 0 || skip >= int(l.got.chunks.size())) {
      loads_.erase(it);
      return Prep::kReady;
    }
    const int n = int(l.got.chunks.size()) - skip;
    if (n > room) return Prep::kNoRoom;
    for (int k = skip; k < int(l.got.chunks.size()); ++k) {
      const DiskWant& w = l.got.chunks[size_t(k)];
      // The chunk continues the tree's chain where it ends now, or stops.
      if ((node >= 0 && !keyed_[size_t(node)]) || chunk_key(key_of(node), w.tokens) != w.key) break;
      const auto [got, fresh] = tree_.adopt(node, w.tokens);
      if (got < 0) break;
      if (fresh) memory_.write_chunk(got, l.got.data[size_t(k)].data());
      node = got;
      *from_disk += c;
    }
    for (auto& buffer : l.got.data) disk_.recycle(std::move(buffer));
    loads_.erase(it);
    return Prep::kReady;
  }
  Load l;
  l.start = i;
  std::vector<DiskWant> want;
  ChunkKey parent = key_of(node);
  for (; i + c <= int(known.size()); i += c) {
    const auto tokens = known.subspan(size_t(i), size_t(c));
    const ChunkKey key = chunk_key(parent, tokens);
    if (!disk_.has(key)) break;
    want.push_back({key, parent, {tokens.begin(), tokens.end()}});
    parent = key;
  }
  if (want.empty()) return Prep::kReady;
  // The same prompt asked for by several requests at once (a restart under
  // load) is read once: the others wait for that read, then find its chunks
  // in the tree.
  for (const auto& [other, o] : loads_)
    if (!o.done && o.first == want[0].key) return Prep::kLoading;
  l.first = want[0].key;
  disk_.load(uint64_t(id), std::move(want));
  loads_.emplace(id, std::move(l));
  return Prep::kLoading;
}

void DiskStaging::take_loads() {
  for (DiskLoad& got : disk_.take_loaded()) {
    auto it = loads_.find(SeqId(got.ticket));
    if (it == loads_.end()) continue;  // forgotten: cancelled while reading
    it->second.done = true;
    it->second.got = std::move(got);
  }
}

}  // namespace cs
