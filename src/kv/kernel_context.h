// The plan an attention kernel reads (ChunkAttention §3.3): which sequences
// share which chunks. Sequences are ordered by a depth-first walk of the tree,
// so a prefix's readers are a contiguous range of indices; a chunk shared
// outside the tree (a Prompt Cache module's) may have any readers, each at its
// own place in its chunk list. Built by PrefixTree::context() only when the
// tree's structure changed; immutable once published, so readers on other
// threads may hold it while the engine thread builds the next one.
//
// Token counts of tail chunks grow every decode step without a rebuild: read
// them from PrefixTree::chunk_length(), not from here.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/chunk_pool.h"

namespace cs {

using SeqId = int64_t;

struct SharedChunk {
  ChunkId chunk;
  std::vector<int> readers;  // sequence indices that read it, ascending
  std::vector<int> depth;    // per reader: the chunk's index in its chunk list
};

struct KernelContext {
  uint64_t version = 0;            // changes with every rebuild
  std::vector<SeqId> seqs;         // ordering: index -> sequence id
  // Every sequence's chunks, root first (for per-sequence kernels):
  // chunks[chunk_begin[i] .. chunk_begin[i + 1]).
  std::vector<ChunkId> chunks;
  std::vector<int> chunk_begin;
  // Chunks read by more than one live sequence (chunk-first phase), ordered
  // by (first reader, its depth there): a run of chunks shared by the same
  // readers at consecutive depths is consecutive here.
  std::vector<SharedChunk> shared;
  // Per sequence, the index in its chunk list where its private chunks (read
  // by it alone; sequence-first phase) begin.
  std::vector<int> private_from;

  int index_of(SeqId id) const;  // -1 if absent
};

// What a batch's attention plan is made from (attn/plan.h), as plain arrays
// a planner reads without the tree (FlashInfer's plan takes the same: page
// indices per sequence in CSR form, their lengths): the tree flattens itself
// into it (PrefixTree::plan_input) on its writer thread.
struct PlanInput {
  KvLayout layout;
  // The sequences in walk order, their chunk lists (CSR: chunks[chunk_begin[i]
  // .. chunk_begin[i + 1])) and the chunks several of them read.
  std::shared_ptr<const KernelContext> ctx;
  std::vector<int> seq_len;           // per sequence: keys cached
  std::vector<int> chunk_len;         // per ctx->chunks entry: keys the chunk holds
  std::vector<uint64_t> chunk_group;  // per ctx->chunks entry: its pin group (Prompt Cache), 0: not pinned
};

}  // namespace cs
