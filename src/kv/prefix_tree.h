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
// Bookkeeping only (SGLang's radix cache: nodes name KV slots, a pool holds
// them): chunk ids, tokens, reference counts, pins and the LRU. The bytes
// live in a KvMemory (kv/kv_memory.h) the caller owns; the one copy the
// tree's decisions need (a partial match, or copy-on-write of a shared tail)
// is queued for the caller (take_copies), and whoever keeps chunks elsewhere
// (the disk tier, the block ledger) learns of them through TreeObserver
// events (kv/tree_observer.h).
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
#include <utility>
#include <vector>

#include "kv/chunk_ids.h"
#include "kv/kernel_context.h"
#include "kv/kv_status.h"
#include "kv/tree_observer.h"
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
  // Ids for the chunks of `layout` that fit in capacity_bytes. retain: keep
  // the chunks of sequences that left, for later joins.
  PrefixTree(KvLayout layout, size_t capacity_bytes, bool retain = true);

  // A copy the caller makes in its KvMemory before it writes or allocates
  // again: the first n tokens' K/V of chunk src into chunk dst.
  struct KvCopy {
    ChunkId src, dst;
    int n;
  };
  // The copies the last join or append queued (at most one each); each call
  // that may queue one expects the queue empty (checked in debug builds).
  std::vector<KvCopy> take_copies() { return std::exchange(copies_, {}); }

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
  int available() const { return ids_.free_count() + cached_; }
  int capacity() const { return ids_.capacity(); }

  // Ends a sequence, releasing what only it used (or caching it: retain).
  KvStatus leave(SeqId id);

  // Cuts sequence `id` back to its first n tokens (speculative decoding's
  // rejected drafts). Chunks wholly past n are let go as leave() lets them go
  // (cached, when the tree retains: they hold the true K/V of real tokens);
  // the chunk the cut falls in is shortened in place when only this sequence
  // reads it and nothing hangs under it, else its first tokens are copied
  // into a chunk of the sequence's own (a queued copy, as join's). Observers
  // hear a shortened chunk as removed, then grown from empty.
  KvStatus truncate(SeqId id, int n);

  // --- Pinned chunks (Prompt Cache modules) ---
  // A chunk outside the tree holding `tokens` (at most chunk_size; the caller
  // writes their K/V into its memory); kNoChunk when the pool has no room.
  // `group` (nonzero: 0 is refused) names the run of pinned chunks it
  // belongs to (one module text segment): readers always attach a group
  // whole and in order.
  ChunkId pin(std::span<const int32_t> tokens, uint64_t group);
  // Frees a pinned chunk no live sequence reads (else kInUse, nothing changed).
  KvStatus unpin(ChunkId c);
  // Starts a detached sequence: its chunk list is built by attach_pinned and
  // append, outside the tree.
  KvStatus join_detached(SeqId id);
  // Appends pinned chunks to a detached sequence's chunk list.
  KvStatus attach_pinned(SeqId id, std::span<const ChunkId> chunks);
  bool pinned(ChunkId c) const { return c >= 0 && c < capacity() && meta_[size_t(c)].pinned; }
  uint64_t pin_group(ChunkId c) const { return meta_[size_t(c)].group; }

  // New sequence `child` sharing all of `parent`'s chunks (parallel sampling).
  KvStatus fork(SeqId parent, SeqId child);

  // Evicts up to n cached chunks, least recently used leaves first. Returns
  // how many were freed.
  int evict(int n);

  // The kernel context for the live sequences, rebuilt only if the structure
  // changed since the last call.
  std::shared_ptr<const KernelContext> context();
  // The tree flattened for a planner (kv/kernel_context.h): the live
  // sequences' context (rebuilt if needed), or the sequences of `ctx` (the
  // context or part of it), with their lengths, chunk lengths and pin groups.
  PlanInput plan_input();
  PlanInput plan_input(std::shared_ptr<const KernelContext> ctx) const;

  // --- Where a sequence's tokens are ---
  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  int length(SeqId id) const;  // tokens of a live sequence (0 if unknown)
  const std::vector<ChunkId>& chunks_of(SeqId id) const;
  int chunk_length(ChunkId c) const { return int(meta_[size_t(c)].tokens.size()); }
  const std::vector<int32_t>& chunk_tokens(ChunkId c) const { return meta_[size_t(c)].tokens; }
  // Chunk and offset of token `index` of a sequence (where its K/V go).
  std::pair<ChunkId, int> slot(SeqId id, int index) const;

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

  // Tells `o` how the tree's chunks grow, are kept and leave it, on the
  // writer thread, from now until unobserve(o) (kv/tree_observer.h). Not owned.
  void observe(TreeObserver* o);
  void unobserve(TreeObserver* o);

  ChunkId parent(ChunkId c) const { return meta_[size_t(c)].parent; }
  // Whether chunk c is a node of the tree (live or retained, not pinned nor a
  // detached sequence's own).
  bool in_tree(ChunkId c) const { return meta_[size_t(c)].in_tree; }
  // The longest run of full chunks in the tree matching the start of
  // `tokens`: its last chunk (kNoChunk: none) and the tokens it covers.
  std::pair<ChunkId, int> match(std::span<const int32_t> tokens) const;
  // Up to k tokens the tree holds after `tokens` (what another sequence
  // wrote after the same text: speculative decoding's drafts), following the
  // full chunks that match them and then a chunk that starts with the rest
  // and goes on, into its children while it is full; empty when none does.
  std::vector<int32_t> continuation(std::span<const int32_t> tokens, int k) const;
  // A retained full chunk under `parent` (kNoChunk: the root) holding
  // `tokens` (chunk_size of them), for a lower tier bringing one back: the
  // chunk and true when it was made (the caller writes its bytes), the child
  // already holding these tokens and false, or kNoChunk when the pool has no
  // room or parent is not a full chunk of the tree (nothing changed then).
  std::pair<ChunkId, bool> adopt(ChunkId parent, std::span<const int32_t> tokens);

  const KvLayout& layout() const { return layout_; }
  KvStats stats() const;
  // What the web console draws (kv/tree_view.h): at most max_nodes nodes,
  // each with its first head_tokens tokens. Writer thread only.
  // on_disk (when given) tells which chunks the disk tier also holds.
  TreeView view(int max_nodes, int head_tokens, const std::function<bool(ChunkId)>& on_disk = {}) const;

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
  };
  struct Seq {
    std::vector<ChunkId> chunks;
    int length = 0;
    bool detached = false;  // built from pinned chunks: its own chunks stay out of the tree
  };

  void check_writer();
  KvStatus not_live(SeqId id, const char* what) const;  // kSequenceLeft or kUnknownSequence
  // Replaces the sequence's last chunk by a chunk of its own holding its first n tokens.
  void copy_tail(Seq& seq, int n);
  // Lets go of a sequence's chunks as leave() does (cached when retained).
  void release(std::span<const ChunkId> chunks);
  ChunkId allocate_chunk();           // evicts cached chunks if needed
  void add_ref(ChunkId c);
  void attach(ChunkId c, ChunkId parent);
  void detach_and_free(ChunkId c);
  void unref(ChunkId c);
  void touch(ChunkId c);
  void update_evictable(ChunkId c);
  void copy_tokens(ChunkId dst, ChunkId src, int n);
  // Tells the observers that chunk c (if in the tree) grew from `before` tokens.
  void grown(ChunkId c, int before);
  template <class F>
  void tell(F&& f) {
    for (TreeObserver* o : observers_) f(*o);
  }
  std::vector<ChunkId>& children_of(ChunkId parent) {
    return parent < 0 ? root_children_ : meta_[size_t(parent)].children;
  }
  const std::vector<ChunkId>& children_of(ChunkId parent) const {
    return parent < 0 ? root_children_ : meta_[size_t(parent)].children;
  }

  KvLayout layout_;
  ChunkIds ids_;
  bool retain_;
  std::vector<KvCopy> copies_;
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
  std::vector<TreeObserver*> observers_;
  uint64_t evicted_ = 0;
};

}  // namespace cs
