// A KvTree (kv/kv_tree.h) in host memory, with per-token access to its
// bytes: the attention tests and benchmarks build their problems on one.
#pragma once
#include "kv/kv_tree.h"

namespace cs {

class HostTree : public KvTree {
 public:
  HostTree(KvLayout layout, size_t capacity_bytes, bool retain = true)
      : KvTree(layout, capacity_bytes, retain, KvPlace::kHost) {}

  // K and V (head_dim floats each) of token `index` of a live sequence, one
  // layer and KV head, written converted to the storage type or read back.
  void write_kv(SeqId id, int index, int layer, int head, const float* k, const float* v) {
    const auto [chunk, off] = slot(id, index);
    memory().write_kv(chunk, off, layer, head, k, v);
  }
  void read_kv(SeqId id, int index, int layer, int head, float* k, float* v) const {
    const auto [chunk, off] = slot(id, index);
    memory().read_kv(chunk, off, layer, head, k, v);
  }

  HostKvMemory& memory() { return *host(); }
  const HostKvMemory& memory() const { return *host(); }
  ChunkPool& pool() { return memory().pool(); }
  const ChunkPool& pool() const { return memory().pool(); }
};

}  // namespace cs
