// DeviceKvMemory's copies: one scatter kernel per layer for a step's rows
// (vLLM's slot mapping), one kernel for a chunk prefix, cudaMemcpy for whole
// chunks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "base/cuda.h"
#include "base/error.h"
#include "kv/device_kv_memory.h"

namespace cs {
namespace {

template <class T>
__device__ T to_kv(float x);
template <>
__device__ __half to_kv<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 to_kv<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Block (token i, KV head h), a thread per element of the head: K goes to
// column `off` of the chunk's K^T block, V to row `off` of its V block.
template <class T>
__global__ void scatter_rows(uint8_t* base, size_t chunk_bytes, size_t layer_off, size_t block_bytes, int c, int d,
                             int n_kv, const int32_t* slots, const float* k, const float* v) {
  const int i = blockIdx.x, h = blockIdx.y;
  const int slot = slots[i], chunk = slot / c, off = slot % c;
  uint8_t* kb = base + size_t(chunk) * chunk_bytes + layer_off + size_t(h) * 2 * block_bytes;
  T* kt = reinterpret_cast<T*>(kb);
  T* vb = reinterpret_cast<T*>(kb + block_bytes);
  const size_t row = (size_t(i) * n_kv + h) * size_t(d);
  for (int x = threadIdx.x; x < d; x += blockDim.x) {
    kt[size_t(x) * c + off] = to_kv<T>(k[row + x]);
    vb[size_t(off) * d + x] = to_kv<T>(v[row + x]);
  }
}

// Block (layer * n_kv + head, K or V): the first n tokens of the block.
__global__ void copy_prefix_kernel(uint8_t* base, size_t chunk_bytes, size_t block_bytes, int c, int d, int src, int dst,
                                   int n) {
  const size_t off = (size_t(blockIdx.x) * 2 + blockIdx.y) * block_bytes;
  const uint16_t* s = reinterpret_cast<const uint16_t*>(base + size_t(src) * chunk_bytes + off);
  uint16_t* t = reinterpret_cast<uint16_t*>(base + size_t(dst) * chunk_bytes + off);
  if (blockIdx.y == 0) {  // K^T [d][c]: the first n of each row
    for (int e = threadIdx.x; e < d * n; e += blockDim.x) {
      const int x = e / n, j = e % n;
      t[size_t(x) * c + j] = s[size_t(x) * c + j];
    }
  } else {  // V [c][d]: the first n rows
    for (int e = threadIdx.x; e < n * d; e += blockDim.x) t[e] = s[e];
  }
}

}  // namespace

DeviceKvMemory::DeviceKvMemory(KvLayout layout, int capacity) : layout_(layout), capacity_(capacity) {
  if (layout.type != KvType::kF16 && layout.type != KvType::kBF16)
    throw Error("CUDA KV memory: the KV type must be f16 or bf16");
  const size_t bytes = size_t(capacity) * layout.chunk_bytes();
  try {
    pool_ = cuda::Buffer(bytes);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNoRoom) throw;
    throw Error(cuda::no_room_message("the KV pool (--kv-memory)", bytes), ErrorKind::kNoRoom);
  }
  cuda::memset_device(pool_.get(), 0, bytes);
}

void DeviceKvMemory::write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) {
  if (n <= 0) return;
  const KvLayout& L = layout_;
  const size_t layer_off = size_t(layer) * size_t(L.n_kv_heads) * 2 * L.block_bytes();
  const dim3 grid(unsigned(n), unsigned(L.n_kv_heads));
  const int threads = L.head_dim < 128 ? L.head_dim : 128;
  auto* kernel = L.type == KvType::kF16 ? scatter_rows<__half> : scatter_rows<__nv_bfloat16>;
  cuda::launch("write_rows", kernel, grid, threads, pool_.get(), L.chunk_bytes(), layer_off, L.block_bytes(), L.chunk_size,
               L.head_dim, L.n_kv_heads, slots, k, v);
}

void DeviceKvMemory::write_host_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) {
  if (n <= 0) return;
  const size_t row = size_t(layout_.n_kv_heads) * size_t(layout_.head_dim) * sizeof(float);
  cuda::Buffer s(size_t(n) * sizeof(int32_t)), dk(size_t(n) * row), dv(size_t(n) * row);
  cuda::to_device(s.get(), slots, size_t(n) * sizeof(int32_t));
  cuda::to_device(dk.get(), k, size_t(n) * row);
  cuda::to_device(dv.get(), v, size_t(n) * row);
  write_rows(layer, s.as<int32_t>(), n, dk.as<float>(), dv.as<float>());
  cuda::synchronize();  // the buffers go on return
}

void DeviceKvMemory::copy_prefix(ChunkId src, ChunkId dst, int n) {
  if (n <= 0) return;
  const KvLayout& L = layout_;
  cuda::launch("copy_prefix", copy_prefix_kernel, dim3(unsigned(L.n_layers * L.n_kv_heads), 2), 256, pool_.get(),
               L.chunk_bytes(), L.block_bytes(), L.chunk_size, L.head_dim, src, dst, n);
}

void DeviceKvMemory::read_chunk(ChunkId id, uint8_t* host) const {
  cuda::to_host(host, base() + size_t(id) * layout_.chunk_bytes(), layout_.chunk_bytes());
}

void DeviceKvMemory::write_chunk(ChunkId id, const uint8_t* host) {
  cuda::to_device(pool_.as<uint8_t>() + size_t(id) * layout_.chunk_bytes(), host, layout_.chunk_bytes());
}

void DeviceKvMemory::upload(const ChunkPool& pool, int n) {
  if (n > capacity_) throw Error("CUDA KV memory: upload of more chunks than it holds");
  cuda::to_device(pool_.get(), pool.data(0), size_t(n) * layout_.chunk_bytes());
}

}  // namespace cs
