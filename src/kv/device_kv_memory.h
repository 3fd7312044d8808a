// KvMemory on a CUDA device: `capacity` chunks of the host pool's layout in
// one device allocation, zeroed at start (so a chunk's unwritten tail holds
// finite values). The attention kernels of attn/cuda_attention.h read it.
// Construction throws cs::Error when no device is usable, and
// ErrorKind::kNoRoom when the device lacks the memory: at start, never
// mid-run. Calls run on the default stream, in order.
#pragma once
#include "base/cuda.h"
#include "kv/kv_memory.h"

namespace cs {

class DeviceKvMemory final : public KvMemory {
 public:
  DeviceKvMemory(KvLayout layout, int capacity);
  DeviceKvMemory(const DeviceKvMemory&) = delete;
  DeviceKvMemory& operator=(const DeviceKvMemory&) = delete;

  const KvLayout& layout() const override { return layout_; }
  int capacity() const override { return capacity_; }
  // slots, k and v are device pointers.
  void write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) override;
  // The same from host arrays (copied over first).
  void write_host_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) override;
  void copy_prefix(ChunkId src, ChunkId dst, int n) override;
  void read_chunk(ChunkId id, uint8_t* host) const override;
  void write_chunk(ChunkId id, const uint8_t* host) override;

  // The device address of chunk 0; chunk i at base() + i * chunk_bytes.
  const uint8_t* base() const { return pool_.as<uint8_t>(); }
  // Copies chunks [0, n) of a host pool of the same layout in (tests, benchmarks).
  void upload(const ChunkPool& pool, int n);

 private:
  KvLayout layout_;
  int capacity_ = 0;
  cuda::Buffer pool_;  // freed after the launches recorded before (base/cuda.h)
};

}  // namespace cs
