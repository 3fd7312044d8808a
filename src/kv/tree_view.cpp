#include <algorithm>
#include <map>

#include "kv/prefix_tree.h"

namespace cs {

TreeView PrefixTree::view(int max_nodes, int head_tokens, const std::function<bool(ChunkId)>& on_disk) const {
  TreeView v;
  int shown_chunks = 0, total_chunks = 0;
  const auto state_of = [&](const Chunk& m) {
    return m.pinned ? TreeViewNode::State::kPinned
                    : m.ref > 0 ? TreeViewNode::State::kLive : TreeViewNode::State::kCached;
  };
  // A node from a run of chunks (in order); false once the cap is reached.
  const auto add = [&](const std::vector<ChunkId>& run, int parent, TreeViewNode::State state) {
    total_chunks += int(run.size());
    if (int(v.nodes.size()) >= max_nodes) return false;
    TreeViewNode n;
    n.parent = parent;
    n.state = state;
    n.chunks = int(run.size());
    const Chunk& first = meta_[size_t(run[0])];
    n.readers = first.ref;
    n.uses = first.uses;
    for (ChunkId c : run) {
      const auto& t = meta_[size_t(c)].tokens;
      n.tokens += int(t.size());
      if (on_disk && on_disk(c)) ++n.on_disk;
      for (size_t i = 0; i < t.size() && int(n.head.size()) < head_tokens; ++i) n.head.push_back(t[i]);
    }
    v.nodes.push_back(std::move(n));
    shown_chunks += int(run.size());
    return true;
  };
  // The tree, breadth first, so a cap keeps the shared roots.
  std::vector<std::pair<ChunkId, int>> queue;  // (first chunk of a run, parent node)
  for (ChunkId c : root_children_) queue.emplace_back(c, -1);
  for (size_t q = 0; q < queue.size(); ++q) {
    auto [c, parent] = queue[q];
    std::vector<ChunkId> run = {c};
    const Chunk* m = &meta_[size_t(c)];
    while (m->children.size() == 1) {
      const Chunk& next = meta_[size_t(m->children[0])];
      if (next.ref != m->ref || next.uses != m->uses) break;
      run.push_back(m->children[0]);
      m = &next;
    }
    const int index = int(v.nodes.size());
    const bool shown = add(run, parent, state_of(*m));
    for (ChunkId child : m->children) queue.emplace_back(child, shown ? index : -1);
  }
  // Modules: each pinned group in order.
  std::map<uint64_t, std::vector<ChunkId>> groups;
  for (size_t c = 0; c < meta_.size(); ++c)
    if (meta_[c].pinned) groups[meta_[c].group].push_back(ChunkId(c));
  for (auto& [g, run] : groups) {
    std::sort(run.begin(), run.end(), [&](ChunkId a, ChunkId b) { return meta_[size_t(a)].group_pos < meta_[size_t(b)].group_pos; });
    add(run, -1, TreeViewNode::State::kPinned);
  }
  // Live sequences; the private chunks of those built from modules.
  std::vector<bool> held(meta_.size(), false);
  for (const auto& [id, seq] : seqs_) {
    ++v.live_sequences;
    v.unshared_chunks += int(seq.chunks.size());
    for (ChunkId c : seq.chunks) v.held_chunks += !held[size_t(c)], held[size_t(c)] = true;
    if (!seq.detached) continue;
    std::vector<ChunkId> own;
    for (ChunkId c : seq.chunks)
      if (!meta_[size_t(c)].pinned) own.push_back(c);
    if (!own.empty()) add(own, -1, TreeViewNode::State::kPrivate);
  }
  v.omitted_chunks = total_chunks - shown_chunks;
  return v;
}

}  // namespace cs
