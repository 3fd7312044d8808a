// A picture of the KV cache for people (the web console) and for routers in
// front of several replicas: the prefix tree as nodes, each a run of chunks
// (a chain of single children with the same readers and uses collapsed into
// one), plus Prompt Cache modules' pinned runs and the private chunks of
// sequences built from them. Built by PrefixTree::view() on the writer
// thread; a plain value afterwards.
#pragma once
#include <cstdint>
#include <vector>

namespace cs {

struct TreeViewNode {
  enum class State { kLive, kCached, kPinned, kPrivate };
  int parent = -1;            // index in TreeView::nodes (parents come first); -1: a root
  State state = State::kCached;
  int chunks = 0;             // chunks in the run
  int tokens = 0;
  int readers = 0;            // live sequences reading it now
  int uses = 0;               // sequences that have read it since it was filled
  int on_disk = 0;            // of its chunks, those the disk tier holds too
  std::vector<int32_t> head;  // its first tokens
};

struct TreeView {
  std::vector<TreeViewNode> nodes;
  int omitted_chunks = 0;     // chunks in nodes beyond the cap
  int live_sequences = 0;
  // Chunks the live sequences' chunk lists hold, counted per sequence: what
  // they would store with no sharing (mode none), against the chunks they
  // actually hold (KvStats::used + the pinned ones they read).
  int unshared_chunks = 0;
  int held_chunks = 0;        // distinct chunks in the live sequences' lists
};

}  // namespace cs
