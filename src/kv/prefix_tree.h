// Prefix-aware KV cache (ChunkAttention §3.1): the KV of every live sequence
// lives in fixed-size chunks organised as a prefix tree, so a prefix that
// several sequences share is stored once, found at join time with no
// registration. Beyond the paper (as SGLang's radix cache), chunks of
// sequences that left stay in the tree, unreferenced, so a later request with
// the same prefix skips their prefill (a partially filled one is copied from);
// they are evicted least-recently-used when the pool needs room.
//
// Vocabulary: join, append, leave, fork, evict, context.
//
// Beyond the tree (Prompt Cache): pinned chunks hold a module's K/V, computed
// once at its schema's position IDs; they are never evicted, never matched by
// join, and read (shared, not copied) by every sequence that attaches them,
// wherever in its chunk list. Such a sequence is detached: it starts outside
// the tree, and the chunks it fills itself are its own (freed when it leaves,
// shared only with its forks), since their K/V depend on the modules before
// them. A sequence's chunk list may thus hold partially filled chunks
// anywhere: a chunk's first key follows the keys of the chunks before it.
//
// Threading: one writer. Every mutating call must come from the same thread
// (checked in debug and sanitizer builds: a second writer thread aborts),
// context() included, since it may rebuild. The snapshot it returns is
// immutable: the writer hands it to kernel threads, which may read it (and the
// chunks it names) while the writer goes on. Chunk data is written only for
// tokens the writer appended; shared chunks are never written (a shared
// partial chunk is copied before it is written: copy-on-write).
//
// Errors are values (KvStatus). A failed call changes nothing.
#pragma once
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/block_ledger.h"
#include "kv/chunk_key.h"
#include "kv/chunk_pool.h"
#include "kv/kernel_context.h"
#include "kv/kv_status.h"
#include "kv/tree_view.h"

namespace cs {

struct KvStats {
  int chunks = 0;      // pool capacity
  int used = 0;        // referenced by live sequences
  int cached = 0;      // retained, unreferenced (evictable)
  int pinned = 0;      // Prompt Cache modules' (not evictable)
  int free = 0;        // in the pool's free list
  int peak = 0;        // most chunks ever allocated at once
  uint64_t evicted = 0;  // cached chunks evicted to make room (or flushed)
  size_t bytes = 0;    // pool size
  size_t chunk_bytes = 0;
};

class PrefixTree {
 public:
  // retain: keep the chunks of sequences that left, for later joins.
  PrefixTree(KvLayout layout, size_t capacity_bytes, bool retain = true);

  // Starts sequence `id` with prompt `tokens`: shares every full chunk of the
  // longest matching path; if the match ends inside a chunk, copies the
  // matching tokens' K/V into the sequence's own chunk. *matched is the number
  // of leading tokens whose K/V are already present (prefill skips them); the
  // caller appends the rest. Cached chunks are reused the same way.
  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched);

  // Appends tokens to a sequence (one per decode step, or many for prefill),
  // growing a new leaf chunk when the tail is full. Their K/V slots are
  // returned by slot() for the caller to write.
  KvStatus append(SeqId id, std::span<const int32_t> tokens);

  // Chunks append(id, n tokens) would allocate (a copy-on-write tail
  // included), and how many allocations can get: free chunks plus every
  // cached one (a cached chunk's descendants are cached too, so all can be
  // evicted). Callers appending to several sequences check the sum first.
  int chunks_to_append(SeqId id, int n) const;
  int available() const { return pool_.free_count() + cached_; }

  // Ends a sequence, releasing what only it used (or caching it: retain).
  KvStatus leave(SeqId id);

  // --- Pinned chunks (Prompt Cache modules) ---
  // A chunk outside the tree holding `tokens` (at most chunk_size; the caller
  // writes their K/V with write_kv_at); kNoChunk when the pool has no room.
  // `group` names the run of pinned chunks it belongs to (one module text
  // segment): readers always attach a group whole and in order.
  ChunkId pin(std::span<const int32_t> tokens, uint64_t group);
  // Frees a pinned chunk no live sequence reads (else kInUse, nothing changed).
  KvStatus unpin(ChunkId c);
  // Starts a detached sequence: its chunk list is built by attach_pinned and
  // append, outside the tree.
  KvStatus join_detached(SeqId id);
  // Appends pinned chunks to a detached sequence's chunk list.
  KvStatus attach_pinned(SeqId id, std::span<const ChunkId> chunks);
  bool pinned(ChunkId c) const { return meta_[size_t(c)].pinned; }
  uint64_t pin_group(ChunkId c) const { return meta_[size_t(c)].group; }

  // New sequence `child` sharing all of `parent`'s chunks (parallel sampling).
  KvStatus fork(SeqId parent, SeqId child);

  // Evicts up to n cached chunks, least recently used leaves first. Returns
  // how many were freed.
  int evict(int n);

  // The kernel context for the live sequences, rebuilt only if the structure
  // changed since the last call.
  std::shared_ptr<const KernelContext> context();

  // --- Reading and writing K/V ---
  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  int length(SeqId id) const;  // tokens of a live sequence (0 if unknown)
  const std::vector<ChunkId>& chunks_of(SeqId id) const;
  int chunk_length(ChunkId c) const { return int(meta_[size_t(c)].tokens.size()); }
  const std::vector<int32_t>& chunk_tokens(ChunkId c) const { return meta_[size_t(c)].tokens; }
  // Chunk and offset of token `index` of a sequence.
  std::pair<ChunkId, int> slot(SeqId id, int index) const;
  // Writes K and V (head_dim floats each, converted to the storage type) of one
  // token for one layer and KV head.
  void write_kv(SeqId id, int index, int layer, int head, const float* k, const float* v);
  // The same at a slot() found earlier (the chunk is the writer's own).
  void write_kv_at(ChunkId chunk, int offset, int layer, int head, const float* k, const float* v);
  // Reads them back as floats (tests, reference kernels).
  void read_kv(SeqId id, int index, int layer, int head, float* k, float* v) const;

  // Every chunk in the tree (live or cached, not pinned) with its parent,
  // parents first: what a subscriber to the block events should hold.
  struct TreeChunk {
    ChunkId id, parent;
    std::span<const int32_t> tokens;
  };
  std::vector<TreeChunk> tree_chunks() const;
  // The distinct hashes (kv/block_ledger.h) of every full block of `block`
  // tokens in the tree, computed from its chunks now: what the events of a
  // BlockLedger said it holds, found another way.
  std::vector<uint64_t> block_hashes(int block) const;

  // Tells `o` (or nobody: nullptr) how the tree's chunks grow and leave it,
  // on the writer thread (kv/block_ledger.h). Not owned.
  void observe(TreeObserver* o) { observer_ = o; }

  // --- Keys (the disk tier, kv/disk_tier.h) ---
  // From now on every full chunk in the tree is named by chunk_key, chained
  // from `root`; `persist` is called on the writer thread with a full chunk
  // whose K/V are complete and worth keeping: one whose last reader has just
  // left (retained; a sequence's chunks root first), one a second sequence
  // has just joined through (a shared prefix that may never be unreferenced
  // under load), and one about to be evicted. A parent is kept before its
  // child, so what is kept is a chain's prefix. It must copy what it keeps
  // (and may be called again for a chunk it has).
  void use_keys(const ChunkKey& root, std::function<void(ChunkId)> persist);
  bool keyed(ChunkId c) const { return meta_[size_t(c)].keyed; }
  const ChunkKey& key(ChunkId c) const { return meta_[size_t(c)].key; }
  const ChunkKey& root_key() const { return root_key_; }
  ChunkId parent(ChunkId c) const { return meta_[size_t(c)].parent; }
  // The longest run of full chunks in the tree matching the start of
  // `tokens`: its last chunk (kNoChunk: none) and the tokens it covers.
  std::pair<ChunkId, int> match(std::span<const int32_t> tokens) const;
  // A retained chunk under `parent` (kNoChunk: the root) holding `tokens` (a
  // full chunk) and `data` (chunk_bytes, the pool's layout), named `key`;
  // kNoChunk when the pool has no room or the key is not the chunk_key of
  // parent and tokens (nothing changed then).
  ChunkId adopt(ChunkId parent, std::span<const int32_t> tokens, std::span<const uint8_t> data, const ChunkKey& key);
  // Calls persist for every full keyed chunk in the tree (a clean shutdown).
  void persist_all();

  ChunkPool& pool() { return pool_; }
  const ChunkPool& pool() const { return pool_; }
  const KvLayout& layout() const { return pool_.layout(); }
  KvStats stats() const;
  // What the web console draws (kv/tree_view.h): at most max_nodes nodes,
  // each with its first head_tokens tokens. Writer thread only.
  // on_disk (when given) tells which keyed chunks the disk tier also holds.
  TreeView view(int max_nodes, int head_tokens, const std::function<bool(const ChunkKey&)>& on_disk = {}) const;

 private:
  struct Chunk {
    std::vector<int32_t> tokens;
    ChunkId parent = kNoChunk;
    std::vector<ChunkId> children;
    int ref = 0;  // live sequences whose chunk list holds this chunk
    uint64_t last_used = 0;
    bool in_tree = false;  // attached (a node of the prefix tree)
    bool pinned = false;   // a module's: kept until unpin
    uint64_t group = 0;    // pinned: its run of chunks
    int group_pos = 0;     // pinned: its place in the run
    int uses = 0;          // sequences that have read it (joined through, created, forked or attached it)
    bool keyed = false;    // full, in the tree, keys on: `key` names it
    ChunkKey key;
  };
  struct Seq {
    std::vector<ChunkId> chunks;
    int length = 0;
    bool detached = false;  // built from pinned chunks: its own chunks stay out of the tree
  };

  void check_writer();
  ChunkId allocate_chunk();           // evicts cached chunks if needed
  void add_ref(ChunkId c);
  void attach(ChunkId c, ChunkId parent);
  void detach_and_free(ChunkId c);
  void unref(ChunkId c);
  void touch(ChunkId c);
  void update_evictable(ChunkId c);
  void copy_tokens(ChunkId dst, ChunkId src, int n);
  // Tells the observer that chunk c (if in the tree) grew from `before`
  // tokens, and names it once it is full (keys on).
  void grown(ChunkId c, int before);
  std::vector<ChunkId>& children_of(ChunkId parent) {
    return parent < 0 ? root_children_ : meta_[size_t(parent)].children;
  }
  const std::vector<ChunkId>& children_of(ChunkId parent) const {
    return parent < 0 ? root_children_ : meta_[size_t(parent)].children;
  }

  ChunkPool pool_;
  bool retain_;
  std::vector<Chunk> meta_;  // indexed by ChunkId
  std::vector<ChunkId> root_children_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::set<SeqId> left_;  // sequences that left (for a precise error)
  std::set<std::pair<uint64_t, ChunkId>> evictable_;  // unreferenced leaves, by age
  std::vector<uint64_t> evict_key_;                   // key in evictable_, 0 = absent
  int cached_ = 0;  // chunks in the tree with ref == 0
  int pinned_ = 0;  // pinned chunks
  std::unordered_map<uint64_t, int> group_size_;  // pinned chunks per group
  uint64_t clock_ = 0;
  bool dirty_ = true;
  uint64_t version_ = 0;
  std::shared_ptr<const KernelContext> context_;
  std::thread::id writer_{};
  TreeObserver* observer_ = nullptr;
  bool keys_ = false;
  ChunkKey root_key_;
  std::function<void(ChunkId)> persist_;
  uint64_t evicted_ = 0;
};

}  // namespace cs
