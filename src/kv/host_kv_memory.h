// KvMemory over a ChunkPool's host memory (the CPU kernels' pool).
#pragma once
#include "kv/kv_memory.h"

namespace cs {

class HostKvMemory final : public KvMemory {
 public:
  explicit HostKvMemory(ChunkPool& pool) : pool_(pool) {}
  const KvLayout& layout() const override { return pool_.layout(); }
  int capacity() const override { return pool_.capacity(); }
  void write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) override;
  void copy_prefix(ChunkId src, ChunkId dst, int n) override;
  void read_chunk(ChunkId id, uint8_t* host) const override;
  void write_chunk(ChunkId id, const uint8_t* host) override;

 private:
  ChunkPool& pool_;
};

}  // namespace cs
