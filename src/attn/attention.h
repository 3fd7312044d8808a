// Attention over the prefix-aware KV cache for one layer: the paths of
// ChunkAttention (per-sequence, two-phase partition) and RelayAttention. All
// compute, for every query row, softmax(q K^T / sqrt(d)) V over the keys that
// row may see.
//
// Plan and run (FlashInfer's split): plan_attention() reads the prefix tree
// once per batch, on the thread that owns the tree, and captures everything
// the kernels need (the tree's KernelContext, every sequence's length, every
// chunk's token count and the index of its first key, the chunk-first runs of
// two-phase partition and relay). The kernels then read only that plan and
// the chunk pool, never the tree, for every layer of the batch.
//
// Queries: rows of n_heads * head_dim floats, grouped by sequence in the
// context's order; sequence i has rows [q_begin[i], q_begin[i+1]) (one row
// each when q_begin is empty: decode). Its k-th of n_i rows sees the first
// L_i - n_i + k + 1 of its L_i cached keys (causal prefill; decode sees all).
// Grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads).
// fp32 accumulation; K/V read in the pool's storage type. Multithreaded.
// Shapes: head_dim 64 or 128, chunk size a multiple of 64 up to 256 (else
// cs::Error).
#pragma once
#include <memory>
#include <vector>

#include "kv/kernel_context.h"
#include "kv/prefix_tree.h"

namespace cs {

// A run of chunks read by the same sequences, each at consecutive places in
// its chunk list: chunk j of the run is reader k's chunk depth[k] + j. A
// shared prefix's readers are a contiguous range of the context order, all at
// the same depth; a Prompt Cache module's may be any sequences, each at its
// own depth.
struct SharedRun {
  std::vector<int> seqs;   // readers (context indices), ascending
  std::vector<int> depth;  // per reader: where the run starts in its chunk list
  std::vector<ChunkId> chunks;
};

// Chunks [j0, j1) of run `run`, inside one part of every reader's walk
// (two-phase partition: 32-chunk parts; relay: its system run whole). Phase
// one leaves one partial state per piece and KV head; phase two merges it.
struct RunPiece {
  int run, j0, j1;
};

// A piece as one reader sees it: its rows in the piece's partial state, and
// the depths [d0, d1) of its chunk list the piece covers.
struct ReaderPiece {
  int piece, row0, d0, d1;
};

struct TppOptions {
  int min_rows = 2;  // chunk-first only when this many query rows (of 2+ sequences) share a chunk
};

struct AttnPlan {
  std::shared_ptr<const KernelContext> ctx;
  KvLayout layout;
  int n_heads = 0;               // query heads
  std::vector<int> q_begin;      // empty = one row per sequence
  std::vector<int> seq_len;      // per sequence: keys cached, this batch's included
  std::vector<int> chunk_len;    // per ctx->chunks entry: keys the chunk holds
  std::vector<int> chunk_start;  // per ctx->chunks entry: index of its first key in the sequence
  // Every path folds each sequence's walk in parts, each from an empty state,
  // merged in order: each run of pinned chunks (a Prompt Cache module's text
  // segment, which every reader attaches whole) is a part, and the chunks
  // between them are cut at every 32nd chunk, so the arithmetic depends on the
  // sequence's own chunk list only, never on the batch or the sharing.
  std::vector<int> part_starts;  // per sequence, part_begin[i] ..: the depth each part starts at, then its end
  std::vector<int> part_begin;   // per sequence (+1): index into part_starts
  std::vector<int> chunk_part;   // per ctx->chunks entry: its part in its sequence's walk
  // Chunk-first work, decided once per batch: two-phase partition's shared
  // runs (empty: nothing worth it, TPP runs per-sequence attention) and
  // relay's system run (the chunks the whole batch shares, from the root).
  std::vector<SharedRun> tpp_runs, relay_runs;
  std::vector<RunPiece> tpp_pieces, relay_pieces;
  std::vector<std::vector<ReaderPiece>> tpp_by_seq, relay_by_seq;  // per sequence, in piece order

  int n_seqs() const { return int(ctx->seqs.size()); }
  int rows_begin(int i) const { return q_begin.empty() ? i : q_begin[size_t(i)]; }
  int rows_of(int i) const { return rows_begin(i + 1) - rows_begin(i); }
  int chunks_of(int i) const { return ctx->chunk_begin[size_t(i) + 1] - ctx->chunk_begin[size_t(i)]; }
  int parts_of(int i) const { return part_begin[size_t(i) + 1] - part_begin[size_t(i)] - 1; }
  // Depths [first, second) of part k of sequence i.
  std::pair<int, int> part(int i, int k) const {
    const int* s = part_starts.data() + part_begin[size_t(i)];
    return {s[k], s[k + 1]};
  }
};

// The plan of one batch over the tree's live sequences (the tree's context()
// may rebuild, so this runs on the tree's writer thread). q_begin as above.
AttnPlan plan_attention(PrefixTree& tree, std::vector<int> q_begin, int n_heads, const TppOptions& opt = {});
// The same for the sequences of `ctx` (the tree's context, or part of it).
AttnPlan plan_attention(const PrefixTree& tree, std::shared_ptr<const KernelContext> ctx, std::vector<int> q_begin,
                        int n_heads, const TppOptions& opt = {});

// Scratch the kernels keep between calls (partial states of the chunk-first
// phase and of walk parts), owned by the caller: one per thread that calls
// the kernels. Opaque: the kernels keep their own types in it.
struct AttnWorkspace {
  std::shared_ptr<void> partial;  // chunk-first states, per (piece, KV head)
  std::shared_ptr<void> parts;    // per-sequence walk parts kept until merged
};

struct AttnProblem {
  const ChunkPool* pool = nullptr;
  const AttnPlan* plan = nullptr;
  int layer = 0;
  const float* q = nullptr;
  float* out = nullptr;
  AttnWorkspace* ws = nullptr;

  int n_seqs() const { return plan->n_seqs(); }
  int rows_begin(int i) const { return plan->rows_begin(i); }
  int rows_of(int i) const { return plan->rows_of(i); }
};

// Every chunk path cuts each (sequence, KV head)'s walk into parts (at chunk
// depths that are multiples of 32, and around pinned chunks), folds each part
// from an empty state and merges the parts in depth order: one arithmetic
// whatever the batch, the sharing and the thread count, so none of them
// changes a bit (attention.cpp, kPartChunks).

// Plain double-precision softmax over each row's keys, read from the tree
// token by token (its own positions, not the plan's). Tests only.
void attn_reference(const PrefixTree& tree, const AttnProblem& p);

// Each (sequence, KV head) walks its own chunk list with online softmax
// (PagedAttention-style). Work is ordered KV head-major, then in context
// order, so sequences that share a chunk read it back to back while it is hot.
// A long prefill with too few (sequence, KV head) items for the threads is
// cut into token slices, a decode into its walks' parts; the output bits do
// not depend on the thread count.
void attn_per_sequence(const AttnProblem& p);

// Two-phase partition (ChunkAttention §3.2, Algorithms 1-2): chunk-first over
// shared chunks (all query rows of the sequences a chunk covers, for every
// query head of a KV head, against the chunk: one small GEMM), saving partial
// states; sequence-first over each sequence's remaining chunks, merged with
// the saved partials (attn_reduce, Eq. 2). With no chunk shared by min_rows
// rows of two or more sequences it is attn_per_sequence itself; with one
// shared run per sequence it gives attn_per_sequence's bits.
void attn_tpp(const AttnProblem& p);

// RelayAttention §3.3 / Appendix A: system attention of all queries against
// the system prompt (the chunks every sequence shares, from the root) as one
// GEMM per KV head returning log-sum-exp; context attention per sequence
// returning log-sum-exp; relay fusion (Eq. 7, 11).
void attn_relay(const AttnProblem& p);

}  // namespace cs
