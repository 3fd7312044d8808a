// The model's KvStore backed by the prefix-aware chunk cache and the attention
// kernels: what makes shared prompt prefixes cost memory and time once.
//
// Sequences are explicit: join() starts one (sharing whatever of its tokens
// the tree already holds; prefill then runs only the tokens after `matched`),
// leave() ends it, fork() copies one for parallel sampling. A batch naming a
// sequence that did not join is an error (KvError kUnknownSequence).
// begin_batch appends the batch's tokens (KvError kPoolExhausted, nothing
// changed, when the pool has no room) and plans the batch's attention once
// (attn/attention.h); store() writes their K/V; attend() runs the chosen
// kernel on that plan for each layer. Single-threaded use (the engine
// thread), like the tree it owns; attend() itself is parallel.
//
// It owns the tree (bookkeeping: kv/prefix_tree.h) with the chunks' bytes
// (kv/kv_tree.h: the tree's queued copies made in them) in host memory, where
// the CPU kernels read them (attn/attention.h), or on a CUDA device
// (KvPlace::kDevice), where the GPU's do (attn/cuda_attention.h): then
// store() and attend() take device pointers (KvStore::on_device), and the
// plan goes to the GPU once per batch as flat tiles (attn/tile_plan.h).
// The disk tier's staging sits beside it (cache/disk_staging.h). The engine
// and the Prompt Cache see the tree only through the narrow facade at the end.
#pragma once
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "attn/attention.h"
#include "attn/cuda_attention.h"
#include "attn/tile_plan.h"
#include "base/cuda.h"
#include "cache/disk_staging.h"
#include "cache/sequence_cache.h"
#include "kv/disk_tier.h"
#include "kv/kv_store.h"
#include "kv/kv_tree.h"

namespace cs {

class PrefixKv : public KvStore, public SequenceCache {
 public:
  // retain: keep the chunks of sequences that left, for later joins.
  // kDevice: the chunks on the GPU (throws cs::Error when none is usable,
  // ErrorKind::kNoRoom when it lacks the memory; f16 or bf16 KV only).
  PrefixKv(KvLayout layout, size_t capacity_bytes, int n_heads, AttnPath path = AttnPath::kTpp, bool retain = true,
           KvPlace place = KvPlace::kHost);
  ~PrefixKv() override;

  // Starts sequence `id` with `tokens` already known (it shares every full
  // chunk the tree holds for them, and copies a partial match); *matched is
  // how many leading tokens have their K/V present. The caller appends the
  // rest through batches. Join with no tokens to share nothing.
  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) override;
  KvStatus join_detached(SeqId id) override;
  KvStatus attach(SeqId id, std::span<const ChunkId> chunks, std::span<const int32_t> positions) override;
  KvStatus leave(SeqId id) override;
  KvStatus truncate(SeqId id, int n) override;
  KvStatus fork(SeqId parent, SeqId child);

  // Chunks the batch would allocate, and how many can be had: begin_batch
  // fails when the first exceeds the second.
  int chunks_needed(const Batch& batch) const override;
  int chunks_available() const override { return tree_.available(); }
  int chunks_to_append(SeqId id, int n) const override { return tree_.chunks_to_append(id, n); }
  int chunk_size() const override { return tree_.layout().chunk_size; }

  void begin_batch(const Batch& batch) override;
  void store(int layer, const float* k, const float* v) override;
  void attend(int layer, const float* q, float* out, const LayerAttention& how) override;
  bool on_device() const override { return tree_.device() != nullptr; }

  // --- The disk tier (kv/disk_tier.h; not owned), through its staging
  // (cache/disk_staging.h): full chunks leaving the pool, and shared
  // prefixes, are stored there; prepare() reads back what continues a
  // prompt's match, and take_loads() (each step) collects it.
  void attach_disk(DiskTier* disk);
  Prep prepare(SeqId id, std::span<const int32_t> known, int room, int* from_disk) override;
  void forget(SeqId id) override;
  void take_loads();
  // Stores every full chunk of the tree (a clean shutdown), waiting for room.
  void persist_all();

  // --- The facade the engine and the Prompt Cache see ---
  KvStats stats() const { return tree_.stats(); }
  // Evicts every retained chunk (what no live sequence or pin holds); how many.
  int flush() { return tree_.evict(tree_.capacity()); }
  const KvLayout& layout() const { return tree_.layout(); }
  int capacity() const { return tree_.capacity(); }
  // Pinned chunks (Prompt Cache modules; kv/prefix_tree.h): the caller writes
  // their bytes into memory().
  ChunkId pin(std::span<const int32_t> tokens, uint64_t group) { return tree_.pin(tokens, group); }
  KvStatus unpin(ChunkId c) { return tree_.unpin(c); }
  bool pinned(ChunkId c) const { return tree_.pinned(c); }
  int chunk_length(ChunkId c) const { return tree_.chunk_length(c); }
  int length(SeqId id) const { return tree_.length(id); }
  std::vector<int32_t> continuation(std::span<const int32_t> tokens, int k) const {
    return tree_.continuation(tokens, k);
  }
  const std::vector<ChunkId>& chunks_of(SeqId id) const { return tree_.chunks_of(id); }
  // The web console's picture (kv/tree_view.h), with what the disk holds.
  TreeView view(int max_nodes, int head_tokens) const;
  // The router's view: distinct hashes of the tree's full blocks (kv/block_ledger.h).
  std::vector<uint64_t> block_hashes(int block) const { return tree_.block_hashes(block); }
  void observe(TreeObserver* o) { tree_.observe(o); }
  // The chunks' bytes.
  KvMemory& memory() { return tree_.memory(); }
  const KvMemory& memory() const { return tree_.memory(); }
  // K and V of token `index` of a live sequence, one layer and KV head, as
  // floats (host memory only: an Error on the device).
  void read_kv(SeqId id, int index, int layer, int head, float* k, float* v) const;
  const AttnPlan& plan() const { return plan_; }

 private:
  // The batch's tokens grouped by sequence, in first-appearance order.
  struct SeqTokens {
    SeqId id;
    std::vector<int32_t> tokens;
  };
  void group(const Batch& batch, std::vector<SeqTokens>& out) const;
  // Per query row, the first key a sliding window of `window` positions
  // lets it see (computed once per batch and window).
  const int* window_first(int window);

  void attend_on_device(int layer, const float* q, float* out, const LayerAttention& how);

  KvTree tree_;
  std::unique_ptr<DiskStaging> staging_;
  int n_heads_;
  AttnPath path_;
  AttnPlan plan_;
  AttnWorkspace ws_;
  std::vector<SeqTokens> groups_;
  std::vector<int32_t> slot_;                  // per batch token: its K/V's slot (chunk * chunk_size + offset)
  std::vector<int> row_of_tok_;                // batch token -> query row in context order
  // Per live sequence, its keys' position ids (a prefix joined from the tree
  // sits at 0, 1, 2, ...; attached module chunks at their layout's); only
  // sliding windows read them.
  std::unordered_map<SeqId, std::vector<int32_t>> pos_;
  std::vector<int> win_first_;    // per query row: see window_first
  int win_ = 0;                   // the window win_first_ is for (0: none yet)
  std::vector<float> q_, out_;
  // On the device: the GPU's kernels, the batch's tiles, and per batch the
  // slots, the row orders both ways and the windows' first keys there.
  std::unique_ptr<CudaAttention> cuda_;
  TilePlan tiles_;
  cuda::Buffer dev_slot_, dev_tok_of_row_, dev_row_of_tok_, dev_win_first_, dev_q_, dev_out_;
  int dev_win_ = -1;  // the window dev_win_first_ is for (-1: none yet)
};

}  // namespace cs
