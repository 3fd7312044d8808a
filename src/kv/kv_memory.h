// The bytes of the KV chunks, apart from their bookkeeping (the prefix tree
// names chunks by id; which ids are free, shared or cached is its business,
// as SGLang's radix cache names KV slots that a pool holds). A KvMemory holds
// `capacity` chunks of one KvLayout (kv/chunk_pool.h: per chunk
// [layer][kv_head][K^T | V]) and makes every copy of them: rows of a step
// written at their slots, a chunk's prefix copied into another (a partial
// match), whole chunks out to the host and back (the disk tier).
//
// HostKvMemory (kv/host_kv_memory.h) keeps them in a ChunkPool's memory;
// DeviceKvMemory (kv/device_kv_memory.h) on a CUDA device, where the kernels
// of attn/cuda_attention.h read them. The same calls give the same bytes in
// both (the tests compare them).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kv/chunk_pool.h"

namespace cs {

class KvMemory {
 public:
  virtual ~KvMemory() = default;
  virtual const KvLayout& layout() const = 0;
  virtual int capacity() const = 0;

  // K and V of n tokens of one layer, fp32 [n][n_kv_heads][head_dim] each,
  // written (converted to the storage type, rounding to nearest even) at
  // slots[i] = chunk * chunk_size + offset. All three arrays live where this
  // memory lives (host memory, or the device's).
  virtual void write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) = 0;
  // write_rows from host memory, wherever this memory lives (the Prompt
  // Cache's module rows).
  virtual void write_host_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) {
    write_rows(layer, slots, n, k, v);
  }
  // The first n tokens of chunk src, every layer and KV head, into chunk dst.
  virtual void copy_prefix(ChunkId src, ChunkId dst, int n) = 0;
  // A whole chunk (layout().chunk_bytes()) to or from host memory.
  virtual void read_chunk(ChunkId id, uint8_t* host) const = 0;
  virtual void write_chunk(ChunkId id, const uint8_t* host) = 0;
};

}  // namespace cs
