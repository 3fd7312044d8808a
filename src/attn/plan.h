// The plan of one batch's attention (FlashInfer's plan/run split):
// plan_attention() reads the tree flattened into plain arrays (PlanInput,
// kv/kernel_context.h; PrefixTree::plan_input) once per batch and captures
// everything the kernels (attn/attention.h) need: the chunk lists, every
// sequence's length, every chunk's token count and the index of its first
// key, where each sequence's walk is cut into parts, and the chunk-first runs
// of two-phase partition and relay. It never sees the tree, and keeps no
// pointer into what it read: the plan is flat arrays.
#pragma once
#include <span>
#include <utility>
#include <vector>

#include "kv/chunk_pool.h"
#include "kv/kernel_context.h"

namespace cs {

// Every path cuts each (sequence, KV head)'s walk at the chunk depths that
// are multiples of kPartChunks: each part is folded from an empty state and
// the parts are merged in depth order. That one arithmetic, whatever the
// batch, the sharing and the thread count, keeps results bit-identical across
// them, and gives the threads independent work when there is little of it
// (one sequence decoding with SmolLM2's 3 KV heads: 3 walks for 2 threads).
// Each part costs a merge per row, and TPP one saved state per part of a
// shared run: short parts multiply the saved states until they leave the
// cache; 32-chunk parts cost Table 3's cell nothing measurable and let two
// threads share a lone long decode (figures: docs/kernels.md).
constexpr int kPartChunks = 32;

// Chunks [j0, j1) of run `run`, inside one part of every reader's walk
// (two-phase partition: 32-chunk parts; relay: its system run whole). Phase
// one leaves one partial state per piece and KV head; phase two merges it.
struct RunPiece {
  int run, j0, j1;
};

// A piece as one reader sees it: its rows in the piece's partial state, and
// the depths [d0, d1) of its chunk list the piece covers. A piece that starts
// inside a part, right where another run's piece of the same reader ends
// (a prefix shared by fewer sequences below one shared by more: n > 1
// choices, a conversation's turns under a system prompt), continues that
// piece's fold: its rows start from the parent's final states (`parent`,
// the parent piece, its rows from `parent_row0`), and the parent, now
// `continued`, is not merged again. Each part of a walk is then one fold
// over its chunks in depth order, as attn_per_sequence does it.
struct ReaderPiece {
  int piece, row0, d0, d1;
  int parent = -1, parent_row0 = 0;
  bool continued = false;
};

// One path's chunk-first work, flat. A run is chunks read by the same
// sequences, each at consecutive places in its chunk list: chunk j of run r
// is reader k's chunk depth k + j. A shared prefix's readers are a contiguous
// range of the walk order, all at the same depth; a Prompt Cache module's may
// be any sequences, each at its own depth. Run r's readers (ascending) are
// reader_seq[reader_begin[r] .. reader_begin[r + 1]) at reader_depth[...],
// its chunks run_chunk[chunk_begin[r] .. chunk_begin[r + 1]).
struct ChunkFirstWork {
  std::vector<int> reader_begin{0}, reader_seq, reader_depth;
  std::vector<int> chunk_begin{0};
  std::vector<ChunkId> run_chunk;
  std::vector<RunPiece> pieces;
  // Per sequence, the pieces it reads in piece order:
  // seq_piece[seq_piece_begin[i] .. seq_piece_begin[i + 1]).
  std::vector<int> seq_piece_begin{0};
  std::vector<ReaderPiece> seq_piece;
  // Phase one's order: the runs of wave w, wave_run[wave_begin[w] ..
  // wave_begin[w + 1]), after every run whose pieces theirs continue.
  std::vector<int> wave_begin{0}, wave_run;
  // Per run, the readers whose first piece of it continues another's: (its
  // sequence, its ReaderPiece's index in seq_piece), at
  // chained[chained_begin[r] .. chained_begin[r + 1]).
  std::vector<int> chained_begin{0};
  std::vector<std::pair<int, int>> chained;

  int n_runs() const { return int(reader_begin.size()) - 1; }
  bool empty() const { return n_runs() == 0; }
  std::span<const int> readers(int r) const { return span_of(reader_seq, reader_begin, r); }
  std::span<const int> depths(int r) const { return span_of(reader_depth, reader_begin, r); }
  std::span<const ChunkId> chunks(int r) const { return span_of(run_chunk, chunk_begin, r); }
  std::span<const ReaderPiece> pieces_of_seq(int i) const { return span_of(seq_piece, seq_piece_begin, i); }
  int n_waves() const { return int(wave_begin.size()) - 1; }
  std::span<const int> wave(int w) const { return span_of(wave_run, wave_begin, w); }
  std::span<const std::pair<int, int>> chained_of(int r) const { return span_of(chained, chained_begin, r); }

 private:
  template <class T>
  static std::span<const T> span_of(const std::vector<T>& v, const std::vector<int>& begin, int i) {
    return {v.data() + begin[size_t(i)], size_t(begin[size_t(i) + 1] - begin[size_t(i)])};
  }
};

struct TppOptions {
  int min_rows = 2;  // chunk-first only when this many query rows (of 2+ sequences) share a chunk
};

// The plan an attention kernel reads (ChunkAttention §3.3): which sequences
// share which chunks, in flat arrays a device copies as they are. Sequences
// are in the tree's depth-first walk order, so a prefix's readers are a
// contiguous range of indices.
struct AttnPlan {
  KvLayout layout;
  int n_heads = 0;                // query heads
  std::vector<SeqId> seqs;        // per sequence: its id
  std::vector<int> q_begin;       // empty = one row per sequence
  std::vector<int> seq_len;       // per sequence: keys cached, this batch's included
  // Every sequence's chunks, root first: chunk[chunk_begin[i] .. chunk_begin[i + 1]).
  std::vector<ChunkId> chunk;
  std::vector<int> chunk_begin{0};
  std::vector<int> chunk_len;    // per chunk entry: keys the chunk holds
  std::vector<int> chunk_start;  // per chunk entry: index of its first key in the sequence
  // Every path folds each sequence's walk in parts, each from an empty state,
  // merged in order: each run of pinned chunks (a Prompt Cache module's text
  // segment, which every reader attaches whole) is a part, and the chunks
  // between them are cut at every 32nd chunk, so the arithmetic depends on the
  // sequence's own chunk list only, never on the batch or the sharing.
  std::vector<int> part_starts;  // per sequence, part_begin[i] ..: the depth each part starts at, then its end
  std::vector<int> part_begin;   // per sequence (+1): index into part_starts
  std::vector<int> chunk_part;   // per chunk entry: its part in its sequence's walk
  // Chunk-first work, decided once per batch: two-phase partition's shared
  // runs (empty: nothing worth it, TPP runs per-sequence attention) and
  // relay's system run (the chunks the whole batch shares, from the root).
  ChunkFirstWork tpp, relay;

  int n_seqs() const { return int(seqs.size()); }
  int rows_begin(int i) const { return q_begin.empty() ? i : q_begin[size_t(i)]; }
  int rows_of(int i) const { return rows_begin(i + 1) - rows_begin(i); }
  int chunks_of(int i) const { return chunk_begin[size_t(i) + 1] - chunk_begin[size_t(i)]; }
  int parts_of(int i) const { return part_begin[size_t(i) + 1] - part_begin[size_t(i)] - 1; }
  // Depths [first, second) of part k of sequence i.
  std::pair<int, int> part(int i, int k) const {
    const int* s = part_starts.data() + part_begin[size_t(i)];
    return {s[k], s[k + 1]};
  }
};

// The plan of one batch over the sequences of `in` (PrefixTree::plan_input:
// all live ones, or part of them). q_begin as above.
AttnPlan plan_attention(PlanInput in, std::vector<int> q_begin, int n_heads, const TppOptions& opt = {});

}  // namespace cs
