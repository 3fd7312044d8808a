// The batch's attention as flat arrays of fixed tiles, for kernels that run
// many small independent pieces of work at once (the GPU's,
// attn/cuda_attention.h): plain int arrays a device copies in one go, read
// from the AttnPlan (attn/plan.h) once per batch and by every layer.
//
// Each sequence's walk (its chunk list) is cut into windows: within each part
// of the walk (AttnPlan's parts: each run of pinned module chunks, and 32-chunk
// stretches), every window_keys / chunk_size chunks from the part's start. A
// tile is one window's chunks for a set of rows (a row: one query token and
// one query head of a KV head), run once per KV head. It leaves one partial
// state (o, m, l) per row; a row's partial states are merged in the order of
// its windows (attn_reduce, ChunkAttention Eq. 2; relay fusion, RelayAttention
// Eq. 7 and 11).
//
// The paths differ only in which rows share a tile:
//  - per-sequence: each tile's rows are one sequence's;
//  - two-phase partition (ChunkAttention §3.2): a window whose chunks several
//    sequences hold, the very same chunks, is one tile for all their rows
//    (chunk-first: one small GEMM); the other windows per sequence
//    (sequence-first); a shared prefix that ends inside a window is read
//    per sequence in that window;
//  - relay (RelayAttention §3.3): only the windows every sequence of the
//    batch holds (the system prompt) are shared.
// A row's windows, and so the arithmetic of its result, are the same in all
// three: a kernel that computes each row of a tile apart from the tile's other
// rows (as tensor-core tiles do) gives every path the same bits, with sharing
// on or off, in any batch.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/chunk_pool.h"

namespace cs {

struct AttnPlan;

enum class AttnPath { kPerSequence, kTpp, kRelay };
const char* attn_path_name(AttnPath p);

// The most rows one tile of the CUDA kernels holds: 32 for head_dim 64 and
// 128, 16 for 256 (the accumulators of a row live in registers).
int tile_max_rows(int head_dim);
// The most keys of one window the CUDA kernels take (16 units of 64 keys).
inline constexpr int kMaxWindowKeys = 1024;

struct TileOptions {
  int window_keys = 512;  // a window's keys: whole chunks, at least one
  int max_rows = 0;       // rows per tile (0: tile_max_rows(head_dim))
  int min_rows = 2;       // two-phase partition: a window is chunk-first when this many rows (of 2+ sequences) read it
};

struct TilePlan {
  KvLayout layout;
  int n_heads = 0;  // query heads
  int group = 0;    // query heads per KV head
  int n_rows = 0;   // query rows (tokens) of the batch
  int window_chunks = 0;
  // Tile t holds chunks [tile_chunk_begin[t], tile_chunk_begin[t + 1]) of
  // chunk_id / chunk_len, in walk order, and rows [tile_row_begin[t], ...+1).
  std::vector<int32_t> tile_chunk_begin{0}, tile_row_begin{0};
  std::vector<int32_t> chunk_id, chunk_len;
  // Per row of a tile: its task (query row * group + query head within the
  // group), the key of its sequence where the tile starts, how many of the
  // tile's keys it may see from there (causal; at least 1), and its partial
  // state's slot, or -1 when this is the task's only partial (the tile
  // writes the output row itself).
  std::vector<int32_t> row_task, row_start, row_hi, row_slot;
  int n_slots = 0;
  // Tasks with other than one partial: merge_task[i]'s slots are
  // merge_slot[merge_begin[i] .. merge_begin[i + 1]), in walk order (none:
  // the output row is zeros).
  std::vector<int32_t> merge_task, merge_begin{0}, merge_slot;
  int shared_tiles = 0;  // tiles whose rows are of two or more sequences

  int n_tiles() const { return int(tile_chunk_begin.size()) - 1; }
  int n_tasks() const { return n_rows * group; }
};

TilePlan plan_tiles(const AttnPlan& plan, AttnPath path, const TileOptions& opt = {});

}  // namespace cs
