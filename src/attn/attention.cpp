#include "attn/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "attn/block.h"
#include "attn/state.h"
#include "base/error.h"

namespace cs {
namespace {

// Query tokens [t0, t1) of each sequence of a range: all of them by default,
// a slice when one sequence's prefill is split over threads.
struct Tokens {
  int t0 = 0, t1 = 1 << 30;
  int begin(const AttnProblem& p, int s) const { return std::min(t0, p.rows_of(s)); }
  int end(const AttnProblem& p, int s) const { return std::min(t1, p.rows_of(s)); }
};

// Query rows of one (sequence range, KV head), gathered contiguously, with
// their running states. Row index = (query row - first row) * group + head in group.
struct RowSet {
  int d = 0;
  std::vector<float> q, o, m, l;
  std::vector<int> visible;  // keys each row may see (sequence-relative)
  std::vector<int> window;   // its first key under a sliding window (0: none)
  std::vector<int> limit;    // per chunk: visible keys of that chunk
  std::vector<int> first;    // per chunk: its first visible key

  void gather(const AttnProblem& p, int seq_begin, int seq_end, int kv_head, Tokens tok = {}) {
    resize(p, [&](auto&& each) {
      for (int s = seq_begin; s < seq_end; ++s) each(s, 0);
    }, tok);
    int row = 0;
    for (int s = seq_begin; s < seq_end; ++s) add_rows(p, s, kv_head, tok, 0, row);
  }

  // The rows of sequences `seqs` (a shared run's readers), each one's keys
  // counted from key shift[k] of its sequence (where the run starts in it).
  void gather(const AttnProblem& p, std::span<const int> seqs, const std::vector<int>& shift, int kv_head) {
    resize(p, [&](auto&& each) {
      for (size_t k = 0; k < seqs.size(); ++k) each(seqs[k], shift[k]);
    });
    int row = 0;
    for (size_t k = 0; k < seqs.size(); ++k) add_rows(p, seqs[k], kv_head, {}, shift[k], row);
  }

  template <class ForEach>
  void resize(const AttnProblem& p, ForEach for_each, Tokens tok = {}) {
    const KvLayout& L = p.plan->layout;
    d = L.head_dim;
    const int group = p.plan->n_heads / L.n_kv_heads;
    int n = 0;
    for_each([&](int s, int) { n += (tok.end(p, s) - tok.begin(p, s)) * group; });
    q.resize(size_t(n) * d);
    o.assign(size_t(n) * d, 0.0f);
    m.assign(size_t(n), -INFINITY);
    l.assign(size_t(n), 0.0f);
    visible.resize(size_t(n));
    window.resize(size_t(n));
    limit.resize(size_t(n));
    first.resize(size_t(n));
  }

  // Appends sequence s's query rows (tokens `tok`) from row `row` on.
  void add_rows(const AttnProblem& p, int s, int kv_head, Tokens tok, int shift, int& row) {
    const int group = p.plan->n_heads / p.plan->layout.n_kv_heads;
    // Queries are pre-scaled by 1/sqrt(d) once here, not once per chunk.
    const float scale = 1.0f / std::sqrt(float(d));
    const int len = p.plan->seq_len[size_t(s)];
    const int nr = p.rows_of(s);
    for (int k = tok.begin(p, s); k < tok.end(p, s); ++k)
      for (int g = 0; g < group; ++g, ++row) {
        const int h = kv_head * group + g;
        const float* src = p.q + (size_t(p.rows_begin(s) + k) * p.plan->n_heads + h) * d;
        for (int x = 0; x < d; ++x) q[size_t(row) * d + size_t(x)] = src[x] * scale;
        visible[size_t(row)] = len - nr + k + 1 - shift;
        window[size_t(row)] = p.window_first ? p.window_first[p.rows_begin(s) + k] - shift : 0;
      }
  }
  int rows() const { return int(m.size()); }

  // The same rows with empty states: the start of one part of their walk.
  void start_like(const RowSet& from) {
    d = from.d;
    q = from.q;
    visible = from.visible;
    window = from.window;
    limit.resize(from.limit.size());
    first.resize(from.first.size());
    o.assign(from.o.size(), 0.0f);
    m.assign(from.m.size(), -INFINITY);
    l.assign(from.l.size(), 0.0f);
  }

  // Rows [row, row + n) take the states of `from`'s rows [from_row, ...):
  // a chained piece's readers go on with the fold of the piece they continue.
  void take_states(const RowSet& from, int from_row, int row, int n) {
    std::copy_n(from.o.begin() + ptrdiff_t(from_row) * d, size_t(n) * size_t(d), o.begin() + ptrdiff_t(row) * d);
    std::copy_n(from.m.begin() + from_row, n, m.begin() + row);
    std::copy_n(from.l.begin() + from_row, n, l.begin() + row);
  }

  // this <- this (+) rows [first, first + rows()) of `from`, row by row: how
  // every path joins a walk's parts, and phase two a saved piece.
  void merge_rows(const RowSet& from, int first = 0) {
    for (int r = 0; r < rows(); ++r)
      merge({o.data() + size_t(r) * d, &m[size_t(r)], &l[size_t(r)]}, from.o.data() + size_t(first + r) * d,
            from.m[size_t(first + r)], from.l[size_t(first + r)], d);
  }

  // Folds one chunk into these rows' states: `len` keys whose first is key
  // `start` of the rows' sequences; `next` (or kNoChunk) is the chunk the
  // caller folds in after it.
  void apply(const AttnProblem& p, ChunkId chunk, int start, int len, int kv_head, ChunkId next) {
    const KvLayout& L = p.plan->layout;
    bool any = false;
    for (int r = 0; r < rows(); ++r) {
      const size_t i = size_t(r);
      limit[i] = std::clamp(visible[i] - start, 0, len);
      first[i] = std::clamp(window[i] - start, 0, len);
      // A chunk wholly before the row's window: nothing of it is visible.
      if (first[i] >= limit[i]) limit[i] = first[i] = 0;
      any = any || limit[i] > 0;
    }
    if (!any) return;
    BlockJob j;
    j.q = q.data();
    j.q_stride = d;
    j.nq = rows();
    j.kt = p.pool->block(chunk, p.layer, kv_head, false);
    j.v = p.pool->block(chunk, p.layer, kv_head, true);
    j.kv_type = int(L.type);
    j.c = L.chunk_size;
    j.d = d;
    j.limit = limit.data();
    j.first = first.data();
    j.scale = 1.0f;
    j.softcap = p.softcap;
    j.o = o.data();
    j.o_stride = d;
    j.m = m.data();
    j.l = l.data();
    if (next != kNoChunk) {
      j.next_kt = p.pool->block(next, p.layer, kv_head, false);
      j.next_v = p.pool->block(next, p.layer, kv_head, true);
    }
    block_update(j);
  }

  // Writes rows back to the output layout (o / l, with the head's sink).
  void scatter(const AttnProblem& p, int seq_begin, int seq_end, int kv_head, Tokens tok = {}) const {
    const int n_heads = p.plan->n_heads, group = n_heads / p.plan->layout.n_kv_heads;
    int row = 0;
    for (int s = seq_begin; s < seq_end; ++s)
      for (int k = tok.begin(p, s); k < tok.end(p, s); ++k)
        for (int g = 0; g < group; ++g, ++row) {
          const int h = kv_head * group + g;
          finalize(o.data() + size_t(row) * d, m[size_t(row)], l[size_t(row)], d,
                   p.out + (size_t(p.rows_begin(s) + k) * n_heads + h) * d, p.sinks ? p.sinks[h] : -INFINITY);
        }
  }
};

// The row sets a workspace slot holds.
std::vector<RowSet>& kept_rows(std::shared_ptr<void>& slot) {
  if (!slot) slot = std::make_shared<std::vector<RowSet>>();
  return *static_cast<std::vector<RowSet>*>(slot.get());
}

// One chunk to fold into a row set. Every walker lists its folds in order and
// hands them to fold_all, which tells the kernel each fold's successor so it
// can prefetch that chunk.
struct Fold {
  RowSet* rows;
  ChunkId chunk;
  int start, len;  // the chunk's first key (sequence-relative) and key count
};

void fold_all(const AttnProblem& p, const std::vector<Fold>& walk, int kv_head) {
  for (size_t s = 0; s < walk.size(); ++s)
    walk[s].rows->apply(p, walk[s].chunk, walk[s].start, walk[s].len, kv_head,
                        s + 1 < walk.size() ? walk[s + 1].chunk : kNoChunk);
}

int chunks_of(const AttnProblem& p, int i) { return p.plan->chunks_of(i); }
int parts_of(const AttnProblem& p, int i) { return p.plan->parts_of(i); }

// Appends to `walk` the chunks of sequences [i0, i1) at depths [d0, d1) that
// lie in part `part` of their walks (every part: -1), depth by depth, so a
// chunk the sequences share is read back to back while it is hot; state(k, s)
// is where the s-th sequence's chunk of part k folds. `skip` (per depth of
// sequence i0, or empty): depths already folded.
template <class State>
void add_depths(const AttnProblem& p, int i0, int i1, int d0, int d1, int part, State state, std::vector<Fold>& walk,
                const std::vector<char>& skip = {}) {
  const AttnPlan& plan = *p.plan;
  for (int k = d0; k < d1; ++k)
    for (int i = i0; i < i1; ++i)
      if (k < chunks_of(p, i) && (skip.empty() || !skip[size_t(k)])) {
        const size_t e = size_t(plan.chunk_begin[size_t(i)] + k);
        if (part >= 0 && plan.chunk_part[e] != part) continue;
        walk.push_back({state(plan.chunk_part[e], i - i0), plan.chunk[e], plan.chunk_start[e], plan.chunk_len[e]});
      }
}

// The depths part k spans in any sequence of [i0, i1).
std::pair<int, int> part_span(const AttnProblem& p, int i0, int i1, int k) {
  int d0 = 1 << 30, d1 = 0;
  for (int i = i0; i < i1; ++i)
    if (k < parts_of(p, i)) {
      const auto [a, b] = p.plan->part(i, k);
      d0 = std::min(d0, a), d1 = std::max(d1, b);
    }
  return {d0, d1};
}

// Folds the chunks of part k of sequences [i0, i1) into rows[0..).
void fold_part(const AttnProblem& p, RowSet* rows, int i0, int i1, int kv_head, int k, std::vector<Fold>& walk,
               const std::vector<char>& skip = {}) {
  walk.clear();
  const auto [d0, d1] = part_span(p, i0, i1, k);
  add_depths(p, i0, i1, d0, d1, k, [rows](int, int s) { return &rows[s]; }, walk, skip);
  fold_all(p, walk, kv_head);
}

// The kernels' shape limits, checked at every entry point.
void check(const AttnProblem& p) {
  const KvLayout& L = p.plan->layout;
  if (!block_head_dim(L.head_dim)) throw Error(std::string("attention: head_dim must be ") + kBlockHeadDims);
  if (L.chunk_size % 64 || L.chunk_size > 256) throw Error("attention: chunk size must be 64, 128, 192 or 256");
  if (p.plan->n_heads % L.n_kv_heads) throw Error("attention: query heads must be a multiple of KV heads");
}

// A prefill of one sequence (or a few) leaves fewer work items than the
// threads want: SmolLM2 has 3 KV heads, so one of 2 threads would walk two of
// the three. Then each sequence's query tokens are cut into slices of at
// least kSliceRows rows (one register block), walked as separate items. A
// decode step with a draft (speculative decoding: 6 to 51 rows per KV head
// on SmolLM2, each seeing the whole context) is cut as a prefill is. The
// block kernel computes every row the same way whatever rows share its call,
// so the output bits do not change. Only for groups of one sequence.
constexpr int kSliceRows = 6;

// Slices of at least kSliceRows rows, a token at least, that sequence i's
// query tokens make, 1..cap.
int slices_of(const AttnProblem& p, int i, int cap) {
  const int tokens = p.rows_of(i), rows = tokens * (p.plan->n_heads / p.plan->layout.n_kv_heads);
  return std::clamp(std::min(rows / kSliceRows, tokens), 1, cap);
}

int token_slices(const AttnProblem& p, int group_size, int items, int want_items) {
  if (group_size != 1 || items >= want_items) return 1;
  int most = 1;
  for (int i = 0; i < p.n_seqs(); ++i) most = std::max(most, slices_of(p, i, 2 * want_items / items));
  return most;
}

// Slice j of `slices` of sequence i's query tokens (empty if the sequence
// has too few rows for that many slices).
Tokens slice_of(const AttnProblem& p, int i, int j, int slices) {
  if (slices == 1) return {};
  const int nr = p.rows_of(i), usable = slices_of(p, i, slices);
  if (j >= usable) return {0, 0};
  return {nr * j / usable, nr * (j + 1) / usable};
}

// Sequences [i0, i1) of group g, and slice j of their query tokens (slices
// of a one-sequence group; empty when that sequence has too few rows).
struct GroupItem {
  int i0, i1;
  Tokens tok;
};
GroupItem group_item(const AttnProblem& p, int kGroup, int g, int j, int slices) {
  const int i0 = g * kGroup;
  return {i0, std::min(p.n_seqs(), i0 + kGroup), slice_of(p, i0, j, slices)};
}

// attn_per_sequence with every (KV head, group, slice, part) an item of its
// own: the parts' states are kept until all are folded, then merged in depth
// order. They live in the caller's workspace from call to call, like phase one's.
void per_sequence_parts(const AttnProblem& p, int kGroup, int groups, int slices, int parts) {
  const int kvh = p.plan->layout.n_kv_heads;
  std::vector<RowSet>& kept = kept_rows(p.ws->parts);
  const size_t need = size_t(kvh) * size_t(groups) * size_t(slices) * size_t(parts) * size_t(kGroup);
  if (kept.size() < need) kept.resize(need);
  // The row sets of item (h, g, j, k): kGroup of them, one per sequence.
  // (Through a pointer: inside the parallel region `kept` would name each
  // worker thread's own, empty, vector.)
  RowSet* const base = kept.data();
  auto at = [&](int h, int g, int j, int k) {
    return base + (((size_t(h) * size_t(groups) + size_t(g)) * size_t(slices) + size_t(j)) * size_t(parts) + size_t(k)) * size_t(kGroup);
  };
#pragma omp parallel
  {
    std::vector<Fold> walk;
#pragma omp for schedule(dynamic) collapse(4)
    for (int h = 0; h < kvh; ++h)
      for (int g = 0; g < groups; ++g)
        for (int j = slices - 1; j >= 0; --j)
          for (int k = 0; k < parts; ++k) {
            const auto [i0, i1, tok] = group_item(p, kGroup, g, j, slices);
            if (tok.t0 >= tok.t1) continue;
            RowSet* rows = at(h, g, j, k);
            for (int i = i0; i < i1; ++i) rows[i - i0].gather(p, i, i + 1, h, tok);
            fold_part(p, rows, i0, i1, h, k, walk);
          }
#pragma omp for schedule(static) collapse(3)
    for (int h = 0; h < kvh; ++h)
      for (int g = 0; g < groups; ++g)
        for (int j = 0; j < slices; ++j) {
          const auto [i0, i1, tok] = group_item(p, kGroup, g, j, slices);
          if (tok.t0 >= tok.t1) continue;
          RowSet* rows = at(h, g, j, 0);
          for (int k = 1; k < parts; ++k)
            for (int i = i0; i < i1; ++i) rows[i - i0].merge_rows(at(h, g, j, k)[i - i0]);
          for (int i = i0; i < i1; ++i) rows[i - i0].scatter(p, i, i + 1, h, tok);
        }
  }
}

}  // namespace

void attn_per_sequence(const AttnProblem& p) {
  check(p);
  // Work items are (KV head, group of sequences adjacent in context order).
  // Within an item the group walks its chunk lists depth by depth, so a chunk
  // the group shares is read from memory once and from L1/L2 by the others:
  // the strongest per-sequence order, short of batching the queries.
  // Groups are as large as possible (up to 32 sequences, so a chunk shared by
  // all of them comes from memory once) while leaving two items per thread.
  const int n = p.n_seqs(), kvh = p.plan->layout.n_kv_heads;
  const int want_items = 2 * omp_get_max_threads();
  const int groups_per_head = std::max(1, (want_items + kvh - 1) / kvh);
  const int kGroup = std::clamp((n + groups_per_head - 1) / groups_per_head, 1, 32);
  const int groups = (n + kGroup - 1) / kGroup;
  const int slices = token_slices(p, kGroup, kvh * groups, want_items);
  int parts = 0;
  for (int i = 0; i < n; ++i) parts = std::max(parts, chunks_of(p, i) ? parts_of(p, i) : 0);
  // Still too few items (a decode of one or a few sequences): each part of
  // the walks becomes an item of its own, merged once all are done. Either
  // way every part is folded and merged alike, so the bits do not change.
  if (parts > 1 && kvh * groups * slices < want_items) return per_sequence_parts(p, kGroup, groups, slices, parts);
#pragma omp parallel
  {
    // sets[k * kGroup + s]: part k's state of the group's s-th sequence.
    std::vector<RowSet> sets(static_cast<size_t>(std::max(parts, 1) * kGroup));
    std::vector<Fold> walk;
    // Heaviest first: a prefill's later slices see more keys.
#pragma omp for schedule(dynamic) collapse(3)
    for (int h = 0; h < kvh; ++h)
      for (int g = 0; g < groups; ++g)
        for (int j = slices - 1; j >= 0; --j) {
          const auto [i0, i1, tok] = group_item(p, kGroup, g, j, slices);
          if (tok.t0 >= tok.t1) continue;
          int depth = 0, np = 1;
          for (int i = i0; i < i1; ++i) {
            sets[size_t(i - i0)].gather(p, i, i + 1, h, tok);
            depth = std::max(depth, chunks_of(p, i));
            np = std::max(np, parts_of(p, i));
          }
          for (int k = 1; k < np; ++k)
            for (int i = i0; i < i1; ++i) sets[size_t(k * kGroup + i - i0)].start_like(sets[size_t(i - i0)]);
          // One walk over all parts (each chunk's successor is prefetched
          // across part boundaries), each part folding into its own states.
          walk.clear();
          add_depths(p, i0, i1, 0, depth, -1, [&](int k, int s) { return &sets[size_t(k * kGroup + s)]; }, walk);
          fold_all(p, walk, h);
          for (int i = i0; i < i1; ++i) {
            for (int k = 1; k < np; ++k) sets[size_t(i - i0)].merge_rows(sets[size_t(k * kGroup + i - i0)]);
            sets[size_t(i - i0)].scatter(p, i, i + 1, h, tok);
          }
        }
  }
}

namespace {

// Phase one: each (segment, KV head) is a small GEMM over its chunks, one
// walk (so each chunk's successor is prefetched across pieces) that starts a
// fresh state at every piece, or the states of the pieces its first piece
// continues (ReaderPiece::parent, folded in an earlier wave); the states are
// kept for phase two. They live in
// the caller's workspace from call to call: their buffers (1 MB for Table 3's
// cell) were otherwise allocated, faulted in and zeroed by the OS every call.
std::span<RowSet> chunk_first(const AttnProblem& p, const ChunkFirstWork& work) {
  const std::vector<RunPiece>& pieces = work.pieces;
  const int kvh = p.plan->layout.n_kv_heads, group = p.plan->n_heads / kvh;
  std::vector<RowSet>& kept = kept_rows(p.ws->partial);
  if (kept.size() < pieces.size() * size_t(kvh)) kept.resize(pieces.size() * size_t(kvh));
  const std::span<RowSet> partial(kept.data(), pieces.size() * size_t(kvh));
  const size_t n_runs = size_t(work.n_runs());
  std::vector<int> first_piece(n_runs + 1, int(pieces.size()));
  for (int j = int(pieces.size()) - 1; j >= 0; --j) first_piece[size_t(pieces[size_t(j)].run)] = j;
#pragma omp parallel
  {
    std::vector<Fold> walk;
    for (int v = 0; v < work.n_waves(); ++v) {
      const std::span<const int> runs = work.wave(v);
      // The loop's closing barrier: a wave's states are whole before the next reads them.
#pragma omp for schedule(dynamic) collapse(2)
      for (size_t x = 0; x < runs.size(); ++x)
      for (int h = 0; h < kvh; ++h) {
        const size_t s = size_t(runs[x]);
        walk.clear();
        RowSet& head = partial[size_t(first_piece[s]) * size_t(kvh) + size_t(h)];
        // Each reader's keys counted from where the run starts in it, so one
        // offset within the run serves every reader's causal limit.
        const std::span<const int> seqs = work.readers(int(s)), depth = work.depths(int(s));
        const std::span<const ChunkId> chunks = work.chunks(int(s));
        const auto& cb = p.plan->chunk_begin;
        std::vector<int> shift(seqs.size());
        for (size_t k = 0; k < seqs.size(); ++k) shift[k] = p.plan->chunk_start[size_t(cb[size_t(seqs[k])] + depth[k])];
        head.gather(p, seqs, shift, h);
        for (const auto& [seq, at] : work.chained_of(int(s))) {
          const ReaderPiece& rp = work.seq_piece[size_t(at)];
          head.take_states(partial[size_t(rp.parent) * size_t(kvh) + size_t(h)], rp.parent_row0, rp.row0,
                           p.rows_of(seq) * group);
        }
        const size_t e0 = size_t(cb[size_t(seqs[0])] + depth[0]);
        for (int j = first_piece[s]; j < first_piece[s + 1]; ++j) {
          RowSet& rows = partial[size_t(j) * size_t(kvh) + size_t(h)];
          if (&rows != &head) rows.start_like(head);
          for (int c = pieces[size_t(j)].j0; c < pieces[size_t(j)].j1; ++c)
            walk.push_back({&rows, chunks[size_t(c)], p.plan->chunk_start[e0 + size_t(c)] - shift[0],
                            p.plan->chunk_len[e0 + size_t(c)]});
        }
        fold_all(p, walk, h);
      }
    }
  }
  return partial;
}

// Phase two: per (sequence, KV head), part by part (kPartChunks): the saved
// states of the pieces that start in the part (a chain's last piece only)
// are merged into its empty state, then its remaining chunks are walked, and
// the part is merged into the row's state. A TPP piece starts where a part
// starts or continues the piece before it, so every row gets each part's
// bits exactly as attn_per_sequence computes them (relay's one system piece
// may span parts).
void sequence_first_phase(const AttnProblem& p, const ChunkFirstWork& work, std::span<const RowSet> partial) {
  const int n = p.n_seqs(), kvh = p.plan->layout.n_kv_heads;
#pragma omp parallel
  {
    RowSet rows, part;
    std::vector<char> done;
    std::vector<const ReaderPiece*> mine;
    std::vector<Fold> walk;
#pragma omp for schedule(static) collapse(2)
    for (int h = 0; h < kvh; ++h)
      for (int i = 0; i < n; ++i) {
        rows.gather(p, i, i + 1, h);
        done.assign(size_t(chunks_of(p, i)), 0);
        for (int k = 0; k < parts_of(p, i); ++k) {
          const auto [d0, d1] = p.plan->part(i, k);
          mine.clear();  // the saved pieces of sequence i that start in this part
          for (const ReaderPiece& rp : work.pieces_of_seq(i)) {
            if (rp.d0 < d0 || rp.d0 >= d1) continue;
            // A continued piece's states went on into the piece after it.
            if (!rp.continued) mine.push_back(&rp);
            std::fill(done.begin() + rp.d0, done.begin() + rp.d1, 1);
          }
          const auto lo = done.begin() + std::min(d0, int(done.size())), hi = done.begin() + std::min(d1, int(done.size()));
          const bool walk_part = std::find(lo, hi, 0) != hi;
          // Part 0 starts from the row's empty state. A later part that is
          // one saved piece and nothing else is merged straight into the
          // row's state: the same bits as through an empty part state.
          const bool direct = k == 0 || (mine.size() == 1 && !walk_part);
          if (!direct) part.start_like(rows);
          RowSet& st = direct ? rows : part;
          for (const ReaderPiece* rp : mine) st.merge_rows(partial[size_t(rp->piece) * size_t(kvh) + size_t(h)], rp->row0);
          if (walk_part) fold_part(p, &st, i, i + 1, h, k, walk, done);
          if (!direct) rows.merge_rows(part);
        }
        rows.scatter(p, i, i + 1, h);
      }
  }
}

}  // namespace

void attn_tpp(const AttnProblem& p) {
  check(p);
  // Nothing worth the chunk-first path: TPP is per-sequence attention, so run
  // exactly that (same work order, same bits).
  if (p.plan->tpp.empty()) return attn_per_sequence(p);
  sequence_first_phase(p, p.plan->tpp, chunk_first(p, p.plan->tpp));
}

void attn_relay(const AttnProblem& p) {
  check(p);
  // System attention: every query row of the batch against the system prompt
  // as one GEMM per KV head (the plan's relay run).
  const std::span<RowSet> partial = chunk_first(p, p.plan->relay);
  // Relay returns (o, lse) from system attention; fusion (Eq. 7) is the same
  // merge, applied to the log-sum-exp form.
  for (RowSet& rs : partial)
    for (int r = 0; r < rs.rows(); ++r) {
      const float l = rs.l[size_t(r)];
      if (l == 0) continue;
      finalize(rs.o.data() + size_t(r) * rs.d, rs.m[size_t(r)], l, rs.d, rs.o.data() + size_t(r) * rs.d);
      state_from_lse(lse_of(rs.m[size_t(r)], l), &rs.m[size_t(r)], &rs.l[size_t(r)]);
    }
  sequence_first_phase(p, p.plan->relay, partial);
}

}  // namespace cs
