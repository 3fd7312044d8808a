// KvMemory in host memory: a ChunkPool it owns, which the CPU kernels read
// (attn/attention.h).
#pragma once
#include <algorithm>

#include "kv/kv_memory.h"

namespace cs {

class HostKvMemory final : public KvMemory {
 public:
  // Room for `capacity` chunks of `layout`.
  HostKvMemory(KvLayout layout, int capacity) : pool_(layout, size_t(std::max(capacity, 0)) * layout.chunk_bytes()) {}
  const KvLayout& layout() const override { return pool_.layout(); }
  int capacity() const override { return pool_.capacity(); }
  void write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) override;
  void copy_prefix(ChunkId src, ChunkId dst, int n) override;
  void read_chunk(ChunkId id, uint8_t* host) const override;
  void write_chunk(ChunkId id, const uint8_t* host) override;

  // K and V (head_dim floats each) of one token of one layer and KV head, at
  // offset `off` of `chunk`, read as floats or written converted (the CPU
  // reference kernels, the Prompt Cache and tests).
  void read_kv(ChunkId chunk, int off, int layer, int head, float* k, float* v) const;
  void write_kv(ChunkId chunk, int off, int layer, int head, const float* k, const float* v);

  const ChunkPool& pool() const { return pool_; }
  ChunkPool& pool() { return pool_; }

 private:
  ChunkPool pool_;
};

}  // namespace cs
