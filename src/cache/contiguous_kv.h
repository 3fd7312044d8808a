// A KV cache with one contiguous buffer per sequence and layer: the simple
// cache that needs no sharing. Elements are fp16 (the default, as llama.cpp's
// KV cache), bf16 or fp32; attention accumulates in fp32 either way. The
// buffer is a run of kDenseBlock-token blocks in the layout of attn/dense.h
// (per block and KV head: K transposed, then V), so attention runs on the
// same block kernel as the chunk cache.
// Sequences are created on first use and dropped with remove().
// Single-threaded use (the engine's thread); attend() itself is parallel.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "attn/state.h"
#include "kv/chunk_pool.h"
#include "kv/kv_store.h"

namespace cs {

class ContiguousKv : public KvStore {
 public:
  // max_tokens bounds each sequence's length (the context size).
  ContiguousKv(KvShape shape, int max_tokens, KvType type = KvType::kF16);

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out, const LayerAttention& how) override;

  int length(int seq) const;  // tokens cached for seq (0 if unknown)
  void remove(int seq);

 private:
  struct Seq {
    int len = 0;
    std::vector<std::vector<uint8_t>> kv;  // [layer]: blocks of block_bytes()
    std::vector<int32_t> pos;              // its keys' position ids
  };
  // One attend_rows call: rows [r0, r0 + n) of the batch's row lists, all of
  // one sequence and KV head. A part (part >= 0) covers only blocks
  // [b0, b1) and leaves its states in parts_ slot `part`.
  struct Work {
    const Seq* seq;
    int kv_head, r0, n;
    int b0 = 0, b1 = 0, part = -1;
  };
  // Rows split into `parts` Works from work_[first]; their states are
  // merged after the parallel loop.
  struct Split {
    int first, parts;
  };
  size_t block_bytes() const;
  size_t head_bytes() const;                                  // one KV head's K^T + V in a block
  uint8_t* k_slot(Seq& s, int layer, int idx, int kv_head);  // K^T column of token idx
  uint8_t* v_slot(Seq& s, int layer, int idx, int kv_head);  // V row of token idx
  void plan_rows();
  // Per row, the first key a sliding window of `window` positions lets it see.
  const int* window_first(int window);
  void split_long_walks();
  size_t part_floats() const;
  StateRef part_state(int slot);

  KvShape shape_;
  int max_tokens_;
  KvType type_;
  size_t es_;  // bytes per element
  std::map<int, Seq> seqs_;
  std::vector<Seq*> tok_seq_;  // per batch token
  std::vector<int> tok_idx_;   // per batch token: its index in the sequence
  // Query rows of the batch grouped by (sequence, KV head), token-major:
  // offset of the row in q / out, and how many keys it sees.
  std::vector<size_t> row_off_;
  std::vector<int> row_visible_;
  std::vector<const Seq*> row_seq_;
  std::vector<int> row_first_;  // for window win_ (0: not computed)
  std::vector<float> row_sink_;  // per row, its head's sink (attend with sinks)
  int win_ = 0;
  std::vector<Work> work_;
  std::vector<Split> splits_;
  std::vector<float> parts_;  // per part slot: a state of 64 rows (part_state)
};

}  // namespace cs
