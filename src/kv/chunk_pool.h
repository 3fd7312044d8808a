// The host memory of a fixed number of KV chunks (ChunkAttention §3.1). A chunk
// holds the K and V of `chunk_size` tokens for every layer and KV head of the
// model, so one prefix tree serves the whole model. Memory is taken (and
// touched: resident) once at start-up and never returned to the OS. Which ids
// are free is the prefix tree's business (kv/chunk_ids.h); HostKvMemory
// (kv/host_kv_memory.h) owns a pool and makes every copy into it, and the CPU
// kernels read it.
//
// Layout of one chunk, chosen so an attention kernel working on (layer, KV head)
// streams one contiguous K block and one contiguous V block:
//   [layer][kv_head][K|V][...]   elements of type KvType
// K is stored transposed, [head_dim][chunk_size], so q.K^T for a run of tokens
// is a row of FMAs over contiguous keys; V is [chunk_size][head_dim], so P.V
// adds contiguous value rows.
// Not thread-safe: the engine thread owns it (see prefix_tree.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cs {

enum class KvType { kF32, kF16, kBF16 };
// The values are the type codes of BlockJob::kv_type and base/f16.h.
static_assert(int(KvType::kF32) == 0 && int(KvType::kF16) == 1 && int(KvType::kBF16) == 2);
size_t kv_type_size(KvType t);
const char* kv_type_name(KvType t);

struct KvLayout {
  int n_layers = 1;
  int n_kv_heads = 1;
  int head_dim = 64;
  int chunk_size = 64;  // tokens per chunk (the paper's c)
  KvType type = KvType::kF16;

  // Chunks that fit in `bytes` (at least 0).
  int chunks_in(size_t bytes) const;
  // Elements in one K (or V) block of a chunk: chunk_size * head_dim.
  size_t block_elems() const { return size_t(chunk_size) * head_dim; }
  size_t block_bytes() const { return block_elems() * kv_type_size(type); }
  size_t chunk_bytes() const { return block_bytes() * 2 * n_layers * n_kv_heads; }
  // Byte offset of the K (v = false) or V block of (layer, head) in a chunk.
  size_t block_offset(int layer, int head, bool v) const {
    return ((size_t(layer) * n_kv_heads + head) * 2 + (v ? 1 : 0)) * block_bytes();
  }
};

using ChunkId = int32_t;
inline constexpr ChunkId kNoChunk = -1;

class ChunkPool {
 public:
  // Room for floor(capacity_bytes / chunk_bytes) chunks (at least 0).
  ChunkPool(KvLayout layout, size_t capacity_bytes);

  const KvLayout& layout() const { return layout_; }
  int capacity() const { return capacity_; }
  size_t bytes() const { return size_t(capacity_) * layout_.chunk_bytes(); }

  uint8_t* data(ChunkId id) { return base_ + size_t(id) * layout_.chunk_bytes(); }
  const uint8_t* data(ChunkId id) const { return base_ + size_t(id) * layout_.chunk_bytes(); }
  uint8_t* block(ChunkId id, int layer, int head, bool v) {
    return data(id) + layout_.block_offset(layer, head, v);
  }
  const uint8_t* block(ChunkId id, int layer, int head, bool v) const {
    return data(id) + layout_.block_offset(layer, head, v);
  }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  KvLayout layout_;
  int capacity_ = 0;
  std::unique_ptr<uint8_t, FreeDeleter> memory_;
  uint8_t* base_ = nullptr;
};

}  // namespace cs
