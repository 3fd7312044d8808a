// Windows, tiles and merges of one batch (attn/tile_plan.h).
#include "attn/tile_plan.h"

#include <algorithm>
#include <map>

#include "attn/plan.h"
#include "base/error.h"

namespace cs {

const char* attn_path_name(AttnPath p) {
  switch (p) {
    case AttnPath::kPerSequence: return "per-sequence";
    case AttnPath::kTpp: return "tpp";
    case AttnPath::kRelay: return "relay";
  }
  return "?";
}

int tile_max_rows(int head_dim) { return head_dim > 128 ? 16 : 32; }

namespace {

// One window of one sequence's walk: entries [e0, e1) of the context's chunk
// list; `ordinal` counts the sequence's windows from the root.
struct Window {
  int seq, e0, e1, ordinal;
};

// Every sequence's windows, in walk order.
std::vector<std::vector<Window>> windows_of(const AttnPlan& p, int per) {
  std::vector<std::vector<Window>> out(size_t(p.n_seqs()));
  for (int i = 0; i < p.n_seqs(); ++i) {
    const int base = p.chunk_begin[size_t(i)];
    int ordinal = 0;
    for (int k = 0; k < p.parts_of(i); ++k) {
      const auto [d0, d1] = p.part(i, k);
      for (int d = d0; d < d1; d += per) out[size_t(i)].push_back({i, base + d, base + std::min(d1, d + per), ordinal++});
    }
  }
  return out;
}

}  // namespace

TilePlan plan_tiles(const AttnPlan& p, AttnPath path, const TileOptions& opt) {
  const KvLayout& L = p.layout;
  if (L.type != KvType::kF16 && L.type != KvType::kBF16)
    throw Error("attention tiles: the KV type must be f16 or bf16");
  if (L.chunk_size % 64 || L.chunk_size <= 0) throw Error("attention tiles: the chunk size must be a multiple of 64");
  if (opt.window_keys < L.chunk_size || opt.window_keys > kMaxWindowKeys)
    throw Error("attention tiles: window_keys must hold a chunk and at most " + std::to_string(kMaxWindowKeys) + " keys");
  if (p.n_heads % L.n_kv_heads) throw Error("attention tiles: query heads must be a multiple of KV heads");
  TilePlan t;
  t.layout = L;
  t.n_heads = p.n_heads;
  t.group = p.n_heads / L.n_kv_heads;
  t.n_rows = p.n_seqs() ? p.rows_begin(p.n_seqs()) : 0;
  t.window_chunks = opt.window_keys / L.chunk_size;
  const int max_rows = opt.max_rows > 0 ? opt.max_rows : tile_max_rows(L.head_dim);
  const int G = t.group, n = p.n_seqs();
  const auto wins = windows_of(p, t.window_chunks);

  // The windows read together: windows of different sequences that hold the
  // same chunks (ids and lengths), in the order first seen.
  std::vector<std::vector<Window>> shared;
  std::vector<std::vector<char>> taken(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) taken[size_t(i)].assign(wins[size_t(i)].size(), 0);
  if (path != AttnPath::kPerSequence && n >= 2) {
    std::map<std::vector<int64_t>, size_t> index;
    std::vector<std::vector<Window>> groups;
    for (int i = 0; i < n; ++i)
      for (const Window& w : wins[size_t(i)]) {
        std::vector<int64_t> key;
        for (int e = w.e0; e < w.e1; ++e)
          key.push_back(int64_t(p.chunk[size_t(e)]) << 32 | uint32_t(p.chunk_len[size_t(e)]));
        const auto [it, fresh] = index.emplace(std::move(key), groups.size());
        if (fresh) groups.emplace_back();
        groups[it->second].push_back(w);
      }
    for (auto& g : groups) {
      int rows = 0;
      for (const Window& w : g) rows += p.rows_of(w.seq) * G;
      const bool chunk_first = path == AttnPath::kRelay ? int(g.size()) == n : g.size() >= 2 && rows >= std::max(2, opt.min_rows);
      if (!chunk_first) continue;
      for (const Window& w : g) taken[size_t(w.seq)][size_t(w.ordinal)] = 1;
      shared.push_back(std::move(g));
    }
  }
  // The sequence-first windows, those at the same depth back to back (so the
  // tiles that read one chunk run at about the same time).
  std::vector<Window> alone;
  for (int i = 0; i < n; ++i)
    for (const Window& w : wins[size_t(i)])
      if (!taken[size_t(i)][size_t(w.ordinal)]) alone.push_back(w);
  std::stable_sort(alone.begin(), alone.end(), [](const Window& a, const Window& b) { return a.ordinal < b.ordinal; });

  // Tiles: a window set's chunks once, its rows max_rows at a time.
  std::vector<std::vector<std::pair<int, int>>> partials(size_t(t.n_tasks()));  // per task: (ordinal, tile row)
  auto add = [&](const std::vector<Window>& ws) {
    const Window& w0 = ws.front();
    int rows_in_tile = max_rows;  // forces a new tile at the first row
    auto new_tile = [&] {
      for (int e = w0.e0; e < w0.e1; ++e) {
        t.chunk_id.push_back(p.chunk[size_t(e)]);
        t.chunk_len.push_back(p.chunk_len[size_t(e)]);
      }
      t.tile_chunk_begin.push_back(int32_t(t.chunk_id.size()));
      t.tile_row_begin.push_back(int32_t(t.row_task.size()));
      if (ws.size() >= 2) ++t.shared_tiles;
      rows_in_tile = 0;
    };
    for (const Window& w : ws) {
      const int s = w.seq, nr = p.rows_of(s), start = p.chunk_start[size_t(w.e0)];
      for (int k = 0; k < nr; ++k) {
        const int hi = p.seq_len[size_t(s)] - nr + k + 1 - start;
        if (hi <= 0) continue;  // the row's causal limit is before this window
        for (int g = 0; g < G; ++g) {
          if (rows_in_tile == max_rows) new_tile();
          const int task = (p.rows_begin(s) + k) * G + g;
          partials[size_t(task)].push_back({w.ordinal, int(t.row_task.size())});
          t.row_task.push_back(task);
          t.row_start.push_back(start);
          t.row_hi.push_back(hi);
          t.row_slot.push_back(-1);
          ++rows_in_tile;
          t.tile_row_begin.back() = int32_t(t.row_task.size());
        }
      }
    }
  };
  for (const auto& g : shared) add(g);
  for (const Window& w : alone) add({w});

  // Slots and merges: a task's partials in walk order.
  for (int task = 0; task < t.n_tasks(); ++task) {
    auto& mine = partials[size_t(task)];
    if (mine.size() == 1) continue;  // written by its tile
    std::sort(mine.begin(), mine.end());
    t.merge_task.push_back(task);
    for (const auto& [ordinal, row] : mine) {
      t.row_slot[size_t(row)] = t.n_slots;
      t.merge_slot.push_back(t.n_slots++);
    }
    t.merge_begin.push_back(int32_t(t.merge_slot.size()));
  }
  return t;
}

}  // namespace cs
