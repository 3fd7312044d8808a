// The attention plan of one batch (attn/plan.h): walks cut into parts, and
// the chunk-first runs of two-phase partition and relay, decided once.
#include "attn/plan.h"

#include <omp.h>

#include <algorithm>

namespace cs {
namespace {

// A run while it is planned (ChunkFirstWork holds them flat).
struct SharedRun {
  std::vector<int> seqs;   // readers (context indices), ascending
  std::vector<int> depth;  // per reader: where the run starts in its chunk list
  std::vector<ChunkId> chunks;
};

// Runs of shared chunks read by at least min_rows query rows of at least
// min_seqs sequences (one sequence's chunk-first GEMM would be exactly its
// per-sequence walk): consecutive entries of the context's shared list with
// the same readers, each one place further in every reader's chunk list.
std::vector<SharedRun> chunk_first_runs(const AttnPlan& p, const KernelContext& c, int min_rows, int min_seqs,
                                        bool whole_batch_only) {
  std::vector<SharedRun> runs;
  const int group = p.n_heads / p.layout.n_kv_heads;
  for (const SharedChunk& s : c.shared) {
    int rows = 0;
    for (int r : s.readers) rows += p.rows_of(r) * group;
    if (rows < min_rows || int(s.readers.size()) < min_seqs) continue;
    if (whole_batch_only && int(s.readers.size()) != p.n_seqs()) continue;
    if (!runs.empty()) {
      SharedRun& last = runs.back();
      const int n = int(last.chunks.size());
      bool next = last.seqs == s.readers;
      for (size_t k = 0; next && k < s.readers.size(); ++k) next = last.depth[k] + n == s.depth[k];
      if (next) {
        last.chunks.push_back(s.chunk);
        continue;
      }
    }
    runs.push_back({s.readers, s.depth, {s.chunk}});
  }
  return runs;
}

// The pieces of the runs: cut (when `cut`) wherever one of its readers moves
// to another part of its walk (a prefix's readers all at once).
std::vector<RunPiece> pieces_of(const AttnPlan& p, const std::vector<SharedRun>& runs, bool cut) {
  std::vector<RunPiece> out;
  for (int r = 0; r < int(runs.size()); ++r) {
    const SharedRun& run = runs[size_t(r)];
    const int n = int(run.chunks.size());
    int j0 = 0;
    for (int j = 1; j <= n; ++j) {
      bool boundary = j == n;
      for (size_t k = 0; cut && !boundary && k < run.seqs.size(); ++k) {
        const size_t e = size_t(p.chunk_begin[size_t(run.seqs[k])] + run.depth[k] + j);
        boundary = p.chunk_part[e] != p.chunk_part[e - 1];
      }
      if (boundary) {
        out.push_back({r, j0, j});
        j0 = j;
      }
    }
  }
  return out;
}

// Chains (ReaderPiece::parent): a reader's piece that starts inside a part
// of its walk, where another run's piece of the reader ends, continues it.
// (A piece of the same run never does: a run's pieces are folded in one
// walk, each from an empty state.)
void link_chains(const AttnPlan& p, const std::vector<RunPiece>& pieces, std::vector<std::vector<ReaderPiece>>& by_seq) {
  for (size_t s = 0; s < by_seq.size(); ++s)
    for (ReaderPiece& b : by_seq[s]) {
      const size_t e = size_t(p.chunk_begin[s] + b.d0);
      if (b.d0 == 0 || p.chunk_part[e] != p.chunk_part[e - 1]) continue;  // starts a part
      for (ReaderPiece& a : by_seq[s])
        if (a.d1 == b.d0 && pieces[size_t(a.piece)].run != pieces[size_t(b.piece)].run) {
          b.parent = a.piece;
          b.parent_row0 = a.row0;
          a.continued = true;
          break;
        }
    }
}

// Phase one's waves: a run after every run its pieces continue. Runs from
// the tree nest (a deeper prefix's readers are a subset of the shallower
// one's), so the waves are as many as the nesting is deep; should links
// ever form a cycle, they are dropped and the pieces merged instead (exact
// to rounding, not to the bit).
void order_waves(const std::vector<RunPiece>& pieces, std::vector<std::vector<ReaderPiece>>& by_seq, int n_runs,
                 ChunkFirstWork& w) {
  std::vector<int> wave(size_t(n_runs), 0);
  bool changed = true;
  int rounds = 0;
  for (; changed && rounds <= n_runs; ++rounds) {
    changed = false;
    for (const auto& mine : by_seq)
      for (const ReaderPiece& b : mine) {
        if (b.parent < 0) continue;
        const size_t r = size_t(pieces[size_t(b.piece)].run), a = size_t(pieces[size_t(b.parent)].run);
        if (wave[r] <= wave[a]) wave[r] = wave[a] + 1, changed = true;
      }
  }
  if (changed) {  // a cycle: no chains
    std::fill(wave.begin(), wave.end(), 0);
    for (auto& mine : by_seq)
      for (ReaderPiece& b : mine) b.parent = -1, b.continued = false;
  }
  const int n_waves = n_runs == 0 ? 0 : *std::max_element(wave.begin(), wave.end()) + 1;
  for (int v = 0; v < n_waves; ++v) {
    for (int r = 0; r < n_runs; ++r)
      if (wave[size_t(r)] == v) w.wave_run.push_back(r);
    w.wave_begin.push_back(int(w.wave_run.size()));
  }
}

// The runs and their pieces, flat, with where each reader finds the pieces:
// its rows in their states and the depths they cover, in piece order.
ChunkFirstWork flatten(const AttnPlan& p, const std::vector<SharedRun>& runs, std::vector<RunPiece> pieces) {
  ChunkFirstWork w;
  for (const SharedRun& r : runs) {
    w.reader_seq.insert(w.reader_seq.end(), r.seqs.begin(), r.seqs.end());
    w.reader_depth.insert(w.reader_depth.end(), r.depth.begin(), r.depth.end());
    w.reader_begin.push_back(int(w.reader_seq.size()));
    w.run_chunk.insert(w.run_chunk.end(), r.chunks.begin(), r.chunks.end());
    w.chunk_begin.push_back(int(w.run_chunk.size()));
  }
  std::vector<std::vector<ReaderPiece>> by_seq(size_t(p.n_seqs()));
  const int group = p.n_heads / p.layout.n_kv_heads;
  for (int j = 0; j < int(pieces.size()); ++j) {
    const RunPiece& pc = pieces[size_t(j)];
    const SharedRun& run = runs[size_t(pc.run)];
    int row = 0;
    for (size_t k = 0; k < run.seqs.size(); ++k) {
      const int s = run.seqs[k];
      by_seq[size_t(s)].push_back({j, row, run.depth[k] + pc.j0, run.depth[k] + pc.j1});
      row += p.rows_of(s) * group;
    }
  }
  link_chains(p, pieces, by_seq);
  order_waves(pieces, by_seq, int(runs.size()), w);
  std::vector<std::vector<std::pair<int, int>>> chained(runs.size());
  for (int s = 0; s < int(by_seq.size()); ++s) {
    for (const ReaderPiece& rp : by_seq[size_t(s)]) {
      if (rp.parent >= 0) chained[size_t(pieces[size_t(rp.piece)].run)].push_back({s, int(w.seq_piece.size())});
      w.seq_piece.push_back(rp);
    }
    w.seq_piece_begin.push_back(int(w.seq_piece.size()));
  }
  for (const auto& of_run : chained) {
    w.chained.insert(w.chained.end(), of_run.begin(), of_run.end());
    w.chained_begin.push_back(int(w.chained.size()));
  }
  w.pieces = std::move(pieces);
  return w;
}

// Splits segments into pieces so that phase one has at least `items` work
// items (segment x KV head). A segment is split by its sequences, never by its
// chunks: each row then sees the same chunks in the same order as the
// per-sequence kernel would, so two-phase partition computes every row with
// the very same arithmetic (bit-identical results with sharing on or off),
// and no extra partial state or merge is needed.
std::vector<SharedRun> split_segments(const std::vector<SharedRun>& segs, int kv_heads, int items) {
  if (segs.empty() || int(segs.size()) * kv_heads >= items) return segs;
  const int factor = (items + int(segs.size()) * kv_heads - 1) / (int(segs.size()) * kv_heads);
  std::vector<SharedRun> out;
  for (const SharedRun& s : segs) {
    const int n = int(s.seqs.size()), per = std::max(1, (n + factor - 1) / factor);
    for (int b = 0; b < n; b += per) {
      const int e = std::min(n, b + per);
      out.push_back({std::vector<int>(s.seqs.begin() + b, s.seqs.begin() + e),
                     std::vector<int>(s.depth.begin() + b, s.depth.begin() + e), s.chunks});
    }
  }
  return out;
}

}  // namespace

AttnPlan plan_attention(PlanInput in, std::vector<int> q_begin, int n_heads, const TppOptions& opt) {
  AttnPlan p;
  const KernelContext& c = *in.ctx;
  p.layout = in.layout;
  p.n_heads = n_heads;
  p.seqs = c.seqs;
  p.q_begin = std::move(q_begin);
  p.seq_len = std::move(in.seq_len);
  p.chunk = c.chunks;
  p.chunk_begin = c.chunk_begin.empty() ? std::vector<int>{0} : c.chunk_begin;
  // A chunk's first key follows the keys of the chunks before it in the
  // sequence's list (partially filled chunks may sit anywhere in it).
  p.chunk_len = std::move(in.chunk_len);
  p.chunk_start.resize(c.chunks.size());
  p.chunk_part.resize(c.chunks.size());
  p.part_begin.push_back(0);
  for (size_t i = 0; i + 1 < p.chunk_begin.size(); ++i) {
    int start = 0, part = -1;
    bool prev_pinned = false;
    uint64_t prev_group = 0;
    for (int e = p.chunk_begin[i]; e < p.chunk_begin[i + 1]; ++e) {
      const int depth = e - p.chunk_begin[i];
      const uint64_t group = in.chunk_group[size_t(e)];
      const bool pinned = group != 0;
      // A part starts with every run of pinned chunks, after one, and at
      // every 32nd chunk outside them.
      const bool starts = pinned ? !prev_pinned || group != prev_group : prev_pinned || depth % kPartChunks == 0;
      if (starts || depth == 0) {
        ++part;
        p.part_starts.push_back(depth);
      }
      prev_pinned = pinned;
      prev_group = group;
      p.chunk_part[size_t(e)] = part;
      p.chunk_start[size_t(e)] = start;
      start += p.chunk_len[size_t(e)];
    }
    if (part < 0) p.part_starts.push_back(0);  // no chunk: one empty part
    p.part_starts.push_back(p.chunk_begin[i + 1] - p.chunk_begin[i]);
    p.part_begin.push_back(int(p.part_starts.size()));
  }
  const int items = 2 * omp_get_max_threads(), kvh = p.layout.n_kv_heads;
  std::vector<SharedRun> tpp = chunk_first_runs(p, c, std::max(2, opt.min_rows), 2, false);
  tpp = split_segments(tpp, kvh, items);
  p.tpp = flatten(p, tpp, pieces_of(p, tpp, true));
  // Relay's system run: the chunks the whole batch shares from the root,
  // split into pieces only when there are too few KV heads for the threads;
  // one piece per run, since system attention is one state per row.
  std::vector<SharedRun> relay = chunk_first_runs(p, c, 1, 1, true);
  if (!relay.empty() && std::any_of(relay[0].depth.begin(), relay[0].depth.end(), [](int d) { return d != 0; }))
    relay.clear();
  if (relay.size() > 1) relay.resize(1);
  relay = split_segments(relay, kvh, items);
  p.relay = flatten(p, relay, pieces_of(p, relay, false));
  return p;
}

}  // namespace cs
