#include "kv/host_kv_memory.h"

#include <algorithm>
#include <cstring>

#include "base/f16.h"

namespace cs {

void HostKvMemory::write_rows(int layer, const int32_t* slots, int n, const float* k, const float* v) {
  const KvLayout& L = pool_.layout();
  const size_t w = size_t(L.n_kv_heads) * size_t(L.head_dim);
  // Split over the threads by (head, row), each head's rows together: a
  // chunk's K is stored dimension-major, so consecutive rows of one head
  // write neighbouring bytes of the same lines. Each element is written
  // once, by one thread, whatever the split.
  const int pairs = n * L.n_kv_heads;
#pragma omp parallel for schedule(static) if (pairs >= 64)
  for (int p = 0; p < pairs; ++p) {
    const int h = p / n, i = p % n;
    write_kv(slots[i] / L.chunk_size, slots[i] % L.chunk_size, layer, h, k + size_t(i) * w + size_t(h) * L.head_dim,
             v + size_t(i) * w + size_t(h) * L.head_dim);
  }
}

void HostKvMemory::copy_prefix(ChunkId src, ChunkId dst, int n) {
  const KvLayout& L = pool_.layout();
  const size_t es = kv_type_size(L.type), c = size_t(L.chunk_size), d = size_t(L.head_dim);
  for (int l = 0; l < L.n_layers; ++l)
    for (int h = 0; h < L.n_kv_heads; ++h) {
      const uint8_t* ks = pool_.block(src, l, h, false);
      uint8_t* kd = pool_.block(dst, l, h, false);
      for (size_t x = 0; x < d; ++x) std::memcpy(kd + x * c * es, ks + x * c * es, size_t(n) * es);
      std::memcpy(pool_.block(dst, l, h, true), pool_.block(src, l, h, true), size_t(n) * d * es);
    }
}

void HostKvMemory::read_chunk(ChunkId id, uint8_t* host) const {
  std::memcpy(host, pool_.data(id), pool_.layout().chunk_bytes());
}

void HostKvMemory::write_chunk(ChunkId id, const uint8_t* host) {
  std::memcpy(pool_.data(id), host, pool_.layout().chunk_bytes());
}

void HostKvMemory::read_kv(ChunkId chunk, int off, int layer, int head, float* k, float* v) const {
  const KvLayout& L = pool_.layout();
  const size_t es = kv_type_size(L.type);
  const uint8_t* kb = pool_.block(chunk, layer, head, false);
  const uint8_t* vb = pool_.block(chunk, layer, head, true) + size_t(off) * L.head_dim * es;
  for (int i = 0; i < L.head_dim; ++i) {
    k[i] = load_kv_elem(kb + (size_t(i) * L.chunk_size + off) * es, int(L.type));
    v[i] = load_kv_elem(vb + size_t(i) * es, int(L.type));
  }
}

void HostKvMemory::write_kv(ChunkId chunk, int off, int layer, int head, const float* k, const float* v) {
  const KvLayout& L = pool_.layout();
  const size_t es = kv_type_size(L.type);
  uint8_t* kb = pool_.block(chunk, layer, head, false);
  uint8_t* vb = pool_.block(chunk, layer, head, true) + size_t(off) * L.head_dim * es;
  for (int i = 0; i < L.head_dim; ++i) {
    store_kv_elem(kb + (size_t(i) * L.chunk_size + off) * es, int(L.type), k[i]);
    store_kv_elem(vb + size_t(i) * es, int(L.type), v[i]);
  }
}

}  // namespace cs
