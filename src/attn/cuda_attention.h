// Attention over the chunk tree on a CUDA device (sm_90: H100, H200): the
// tiles of a TilePlan (attn/tile_plan.h) against a DeviceKvMemory, for head
// dims 64, 128 and 256, fp16 or bf16 K/V, grouped-query attention and
// sliding windows, decode rows and chunked-prefill rows alike (a row sees its
// sequence's keys up to its own, causal).
//
// Two launches run every tile of the batch for every KV head, one for tiles
// of more than 16 rows (the chunk-first tiles of shared windows) and one for
// the rest (fewer registers and less shared memory, so more blocks per
// multiprocessor), the second allowed to start while the first runs. A tile
// is its query rows against its window's chunks on tensor cores (mma.sync
// m16n8k16, fp32 accumulation, online softmax in base 2); the four warps of
// a tile split each 64-key unit of the window into 16-key slices and merge
// their states at its end. A row whose result has one part is written out
// there; the rest leave partial states that a third launch merges, a warp
// per row, in walk order (attn_reduce, ChunkAttention Eq. 2).
// Every row is computed apart from the other rows of its tile, so the three
// paths, any batch and any sharing give one row the same bits
// (attn/tile_plan.h).
//
// Numerics: queries are scaled by log2(e)/sqrt(d) in fp32 and rounded to the
// K/V type; scores and the softmax are fp32; probabilities are rounded to the
// K/V type for P.V, whose sums are fp32. Results are fp32.
#pragma once
#include <cstdint>
#include <memory>

#include "attn/tile_plan.h"
#include "kv/device_kv_memory.h"

namespace cs {

class CudaAttention {
 public:
  struct Options {
    // Pipeline stages of the 16-row tiles at head_dim 128: 2 (three tiles per
    // multiprocessor) or 3 (two, each with two units in flight); 0: 3 when
    // the batch has no chunk-first tiles, else 2 (docs/benchmarks.md, the
    // GPU's stage measurements: a deeper pipeline shortens the last wave of
    // a batch of per-sequence tiles, a wider one serves the small tiles
    // running beside chunk-first ones).
    int decode_stages = 0;
    bool no_merge = false;  // benchmarks' breakdown only: the merge launch is left out (wrong results)
  };
  // Throws cs::Error when no usable device is present (base/cuda.h).
  explicit CudaAttention(Options opt);
  CudaAttention() : CudaAttention(Options{}) {}
  ~CudaAttention();
  CudaAttention(const CudaAttention&) = delete;
  CudaAttention& operator=(const CudaAttention&) = delete;

  // Uploads a batch's plan (one copy); every layer of the batch then runs on it.
  void set_plan(const TilePlan& plan);

  // One layer: q and out are device fp32 [n_rows][n_heads][head_dim];
  // window_first (device, per query row: the first key of its sequence the row
  // may see) or null. Asynchronous on the default stream.
  void run(const DeviceKvMemory& kv, int layer, const float* q, float* out, const int32_t* window_first = nullptr);

  int tiles() const;   // of the plan set
  int merges() const;  // (query row, head) pairs whose parts are merged

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cs
