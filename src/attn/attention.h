// Attention over the prefix-aware KV cache for one layer: the paths of
// ChunkAttention (per-sequence, two-phase partition) and RelayAttention. All
// compute, for every query row, softmax(q K^T / sqrt(d)) V over the keys that
// row may see.
//
// Plan and run (FlashInfer's split): plan_attention() (attn/plan.h) reads the
// tree flattened into plain arrays once per batch; the kernels here then read
// only that plan and the chunk pool, never the tree, for every layer of the
// batch.
//
// Queries: rows of n_heads * head_dim floats, grouped by sequence in the
// context's order; sequence i has rows [q_begin[i], q_begin[i+1]) (one row
// each when q_begin is empty: decode). Its k-th of n_i rows sees the first
// L_i - n_i + k + 1 of its L_i cached keys (causal prefill; decode sees all).
// Grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads).
// fp32 accumulation; K/V read in the pool's storage type. Multithreaded.
// Shapes: head_dim 64, 96, 128 or 256, chunk size a multiple of 64 up to 256 (else
// cs::Error).
#pragma once
#include <memory>
#include <vector>

#include "attn/plan.h"
#include "kv/chunk_pool.h"

namespace cs {

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
  // A sliding window: per query row (as q's rows), the first key of its
  // sequence it may see; null: every key up to its own.
  const int* window_first = nullptr;
  // Attention sinks (gpt-oss): per query head, a logit in the softmax's
  // denominator with no value (attn/state.h, finalize); null: none.
  const float* sinks = nullptr;
  // Gemma 2's logit soft-capping (attn/block.h, BlockJob::softcap); 0: none.
  float softcap = 0.0f;

  int n_seqs() const { return plan->n_seqs(); }
  int rows_begin(int i) const { return plan->rows_begin(i); }
  int rows_of(int i) const { return plan->rows_of(i); }
};

// Every chunk path cuts each (sequence, KV head)'s walk into parts (at chunk
// depths that are multiples of 32, and around pinned chunks), folds each part
// from an empty state and merges the parts in depth order: one arithmetic
// whatever the batch, the sharing and the thread count, so none of them
// changes a bit (attention.cpp, kPartChunks).

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
// rows of two or more sequences it is attn_per_sequence itself; otherwise it
// gives attn_per_sequence's bits too (a run nested in a wider one goes on
// from the wider run's states: ReaderPiece, attn/plan.h).
void attn_tpp(const AttnProblem& p);

// RelayAttention §3.3 / Appendix A: system attention of all queries against
// the system prompt (the chunks every sequence shares, from the root) as one
// GEMM per KV head returning log-sum-exp; context attention per sequence
// returning log-sum-exp; relay fusion (Eq. 7, 11).
void attn_relay(const AttnProblem& p);

}  // namespace cs
