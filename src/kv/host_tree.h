// A prefix tree with its chunks' bytes in host memory and the copies it
// queues made at once: the model's cache keeps one (cache/prefix_kv.h), and
// the attention tests and benchmarks build their problems on one. join and
// append hide the tree's own to make the copies; a copy left untaken through
// a PrefixTree& is caught by the tree's next call (debug builds).
#pragma once
#include "kv/host_kv_memory.h"
#include "kv/prefix_tree.h"

namespace cs {

class HostTree : public PrefixTree {
 public:
  HostTree(KvLayout layout, size_t capacity_bytes, bool retain = true)
      : PrefixTree(layout, capacity_bytes, retain), memory_(layout, capacity()) {}

  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) {
    const KvStatus st = PrefixTree::join(id, tokens, matched);
    copy_queued();
    return st;
  }
  KvStatus append(SeqId id, std::span<const int32_t> tokens) {
    const KvStatus st = PrefixTree::append(id, tokens);
    copy_queued();
    return st;
  }
  KvStatus truncate(SeqId id, int n) {
    const KvStatus st = PrefixTree::truncate(id, n);
    copy_queued();
    return st;
  }

  // K and V (head_dim floats each) of token `index` of a live sequence, one
  // layer and KV head, written converted to the storage type or read back.
  void write_kv(SeqId id, int index, int layer, int head, const float* k, const float* v) {
    const auto [chunk, off] = slot(id, index);
    memory_.write_kv(chunk, off, layer, head, k, v);
  }
  void read_kv(SeqId id, int index, int layer, int head, float* k, float* v) const {
    const auto [chunk, off] = slot(id, index);
    memory_.read_kv(chunk, off, layer, head, k, v);
  }

  HostKvMemory& memory() { return memory_; }
  const HostKvMemory& memory() const { return memory_; }
  ChunkPool& pool() { return memory_.pool(); }
  const ChunkPool& pool() const { return memory_.pool(); }

 private:
  void copy_queued() {
    for (const KvCopy& c : take_copies()) memory_.copy_prefix(c.src, c.dst, c.n);
  }
  HostKvMemory memory_;
};

}  // namespace cs
