// The tile plan (attn/tile_plan.h), checked on the CPU: run in double
// precision, tile by tile and merge by merge, it gives the reference's
// attention; every path cuts each row's keys into the very same windows (what
// makes the GPU's paths agree bit for bit); two-phase partition and relay
// share the windows they should.
#include "attn/tile_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "attn_world.h"
#include "base/error.h"
#include "base/f16.h"

namespace cs {
namespace {

using namespace cs::test;

// The plan run on the CPU in double precision: each tile row's state over
// its window's keys (K^T and V read from the pool), written out or kept in
// its slot, then the merges in slot order.
std::vector<float> run_tiles(const TilePlan& t, const ChunkPool& pool, int layer, const std::vector<float>& q,
                             const std::vector<int>& window_first) {
  const KvLayout& L = t.layout;
  const int d = L.head_dim, c = L.chunk_size, type = int(L.type);
  const size_t es = kv_type_size(L.type);
  std::vector<float> out(size_t(t.n_rows) * size_t(t.n_heads) * size_t(d), NAN);
  struct State {
    std::vector<double> o;
    double m = -INFINITY, l = 0;
  };
  auto out_row = [&](int task, int h) {
    return out.data() + (size_t(task / t.group) * size_t(t.n_heads) + size_t(h * t.group + task % t.group)) * size_t(d);
  };
  for (int h = 0; h < L.n_kv_heads; ++h) {
    std::vector<State> slots(size_t(t.n_slots));
    for (int tile = 0; tile < t.n_tiles(); ++tile) {
      // The window's keys, in walk order.
      std::vector<std::vector<double>> keys, values;
      for (int i = t.tile_chunk_begin[size_t(tile)]; i < t.tile_chunk_begin[size_t(tile) + 1]; ++i) {
        const uint8_t* kt = pool.block(t.chunk_id[size_t(i)], layer, h, false);
        const uint8_t* vb = pool.block(t.chunk_id[size_t(i)], layer, h, true);
        for (int j = 0; j < t.chunk_len[size_t(i)]; ++j) {
          std::vector<double> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
          for (int x = 0; x < d; ++x) {
            k[size_t(x)] = load_kv_elem(kt + (size_t(x) * size_t(c) + size_t(j)) * es, type);
            v[size_t(x)] = load_kv_elem(vb + (size_t(j) * size_t(d) + size_t(x)) * es, type);
          }
          keys.push_back(std::move(k));
          values.push_back(std::move(v));
        }
      }
      for (int r = t.tile_row_begin[size_t(tile)]; r < t.tile_row_begin[size_t(tile) + 1]; ++r) {
        const int task = t.row_task[size_t(r)], qr = task / t.group;
        const float* qv = q.data() + (size_t(qr) * size_t(t.n_heads) + size_t(h * t.group + task % t.group)) * size_t(d);
        const int lo = window_first.empty() ? 0 : std::max(0, window_first[size_t(qr)] - t.row_start[size_t(r)]);
        const int hi = std::min(t.row_hi[size_t(r)], int(keys.size()));
        EXPECT_GT(t.row_hi[size_t(r)], 0);
        State st;
        st.o.assign(size_t(d), 0.0);
        std::vector<double> s(keys.size());
        for (int j = lo; j < hi; ++j) {
          double dot = 0;
          for (int x = 0; x < d; ++x) dot += double(qv[x]) * keys[size_t(j)][size_t(x)];
          s[size_t(j)] = dot / std::sqrt(double(d));
          st.m = std::max(st.m, s[size_t(j)]);
        }
        for (int j = lo; j < hi; ++j) {
          const double w = std::exp(s[size_t(j)] - st.m);
          st.l += w;
          for (int x = 0; x < d; ++x) st.o[size_t(x)] += w * values[size_t(j)][size_t(x)];
        }
        if (t.row_slot[size_t(r)] < 0) {
          float* o = out_row(task, h);
          for (int x = 0; x < d; ++x) o[x] = st.l > 0 ? float(st.o[size_t(x)] / st.l) : 0.0f;
        } else {
          slots[size_t(t.row_slot[size_t(r)])] = std::move(st);
        }
      }
    }
    for (size_t i = 0; i < t.merge_task.size(); ++i) {
      double m = -INFINITY, l = 0;
      std::vector<double> o(size_t(d), 0.0);
      for (int k = t.merge_begin[i]; k < t.merge_begin[i + 1]; ++k) m = std::max(m, slots[size_t(t.merge_slot[size_t(k)])].m);
      for (int k = t.merge_begin[i]; k < t.merge_begin[i + 1]; ++k) {
        const State& st = slots[size_t(t.merge_slot[size_t(k)])];
        if (st.m == -INFINITY) continue;
        const double f = std::exp(st.m - m);
        l += f * st.l;
        for (int x = 0; x < d; ++x) o[size_t(x)] += f * st.o[size_t(x)];
      }
      float* dst = out_row(t.merge_task[i], h);
      for (int x = 0; x < d; ++x) dst[x] = l > 0 ? float(o[size_t(x)] / l) : 0.0f;
    }
  }
  return out;
}

// Per task: its windows as (chunks, start key, keys it sees), in walk order.
using Windows = std::vector<std::tuple<std::vector<int32_t>, int, int>>;
std::vector<Windows> windows_by_task(const TilePlan& t) {
  std::vector<Windows> out(size_t(t.n_tasks()));
  std::vector<std::pair<int, int>> where(size_t(t.n_slots));  // slot -> (tile, row)
  auto window = [&](int tile, int r) {
    std::vector<int32_t> chunks(t.chunk_id.begin() + t.tile_chunk_begin[size_t(tile)],
                                t.chunk_id.begin() + t.tile_chunk_begin[size_t(tile) + 1]);
    return std::make_tuple(chunks, int(t.row_start[size_t(r)]), int(t.row_hi[size_t(r)]));
  };
  for (int tile = 0; tile < t.n_tiles(); ++tile)
    for (int r = t.tile_row_begin[size_t(tile)]; r < t.tile_row_begin[size_t(tile) + 1]; ++r) {
      if (t.row_slot[size_t(r)] < 0) out[size_t(t.row_task[size_t(r)])].push_back(window(tile, r));
      else where[size_t(t.row_slot[size_t(r)])] = {tile, r};
    }
  for (size_t i = 0; i < t.merge_task.size(); ++i) {
    EXPECT_TRUE(out[size_t(t.merge_task[i])].empty()) << "a task both written and merged";
    for (int k = t.merge_begin[i]; k < t.merge_begin[i + 1]; ++k) {
      const auto [tile, r] = where[size_t(t.merge_slot[size_t(k)])];
      out[size_t(t.merge_task[i])].push_back(window(tile, r));
    }
  }
  return out;
}

constexpr AttnPath kPaths[] = {AttnPath::kPerSequence, AttnPath::kTpp, AttnPath::kRelay};

int g_shared_tiles = 0;

void check(const Case& c, int window_keys) {
  SCOPED_TRACE(name(c) + " window_keys " + std::to_string(window_keys));
  World w(c);
  std::vector<float> ref;
  attn_reference(*w.tree, w.problem(ref));
  const Planned& run = *w.run;
  std::vector<Windows> first;
  for (AttnPath path : kPaths) {
    SCOPED_TRACE(attn_path_name(path));
    const TilePlan t = plan_tiles(run.plan, path, {window_keys});
    for (int tile = 0; tile < t.n_tiles(); ++tile) {
      const int rows = t.tile_row_begin[size_t(tile) + 1] - t.tile_row_begin[size_t(tile)];
      EXPECT_GE(rows, 1);
      EXPECT_LE(rows, tile_max_rows(c.d));
      int keys = 0;
      for (int i = t.tile_chunk_begin[size_t(tile)]; i < t.tile_chunk_begin[size_t(tile) + 1]; ++i) keys += t.chunk_len[size_t(i)];
      EXPECT_LE(keys, window_keys);
    }
    const auto got = run_tiles(t, w.tree->pool(), 1, w.q, run.window_first);
    EXPECT_LT(max_diff(got, ref), 1e-5f);
    const auto wins = windows_by_task(t);
    if (first.empty()) first = wins;
    EXPECT_EQ(wins, first) << "a row's windows differ from per-sequence's";
    if (path == AttnPath::kPerSequence) {
      EXPECT_EQ(t.shared_tiles, 0);
    }
    if (path == AttnPath::kTpp) g_shared_tiles += t.shared_tiles;
  }
}

TEST(TilePlan, RunOnTheCpuItGivesTheReference) {
  g_shared_tiles = 0;
  uint32_t seed = 1;
  for (int d : {64, 128, 256})
    for (int group : {1, 3, 4, 8})
      for (KvType type : {KvType::kF16, KvType::kBF16})
        for (int window_keys : {64, 512}) check({1 + int(seed * 37 % 24), 1 + int(seed % 2), group, d, type, seed++}, window_keys);
  EXPECT_GT(g_shared_tiles, 10) << "two-phase partition shared no window";
}

TEST(TilePlan, PrefillRowsAndSlidingWindows) {
  uint32_t seed = 500;
  for (int window : {0, 1, 37, 100, 1000})
    for (bool prefill : {false, true})
      for (int window_keys : {64, 128, 1024}) {
        check({1 + int(seed * 37 % 24), 1 + int(seed % 2), 1 + int(seed % 4), seed % 2 ? 64 : 128, KvType(1 + seed % 2),
               seed, prefill, window},
              window_keys);
        ++seed;
      }
}

TEST(TilePlan, LargeBatchesSplitRowsOverTiles) {
  for (int batch : {32, 96}) check({batch, 2, 4, 64, KvType::kF16, 100u + uint32_t(batch)}, 64);
}

// One system prompt of three windows and a bit, private suffixes: two-phase
// partition and relay read the three whole windows once for all sequences
// (their rows 32 to a tile) and the window where the prompt ends per
// sequence; per-sequence reads every window per sequence.
TEST(TilePlan, ASharedPrefixIsReadOncePerWindow) {
  const KvLayout L{1, 2, 128, 64, KvType::kF16};
  HostTree t(L, L.chunk_bytes() * 200);
  std::vector<int32_t> sys(3 * 512 + 100, 5);
  const int n = 40;
  for (SeqId s = 0; s < n; ++s) {
    std::vector<int32_t> prompt = sys;
    prompt.push_back(1000 + int32_t(s));
    int m;
    ASSERT_TRUE(t.join(s, prompt, &m).ok());
    ASSERT_TRUE(t.append(s, std::span(prompt).subspan(size_t(m))).ok());
  }
  const AttnPlan plan = plan_attention(t.plan_input(), {}, 2 * 8);  // GQA: 8 query heads per KV head
  const TilePlan per = plan_tiles(plan, AttnPath::kPerSequence), tpp = plan_tiles(plan, AttnPath::kTpp),
                 relay = plan_tiles(plan, AttnPath::kRelay);
  // 25 shared chunks, then each sequence's copy of the 26th: windows of 8, 8,
  // 8 and 2 chunks. A sequence's rows (8 query heads) are a tile of their
  // own; a shared window's 40 x 8 = 320 rows make 10 tiles of 32.
  EXPECT_EQ(per.n_tiles(), 4 * n);
  EXPECT_EQ(tpp.shared_tiles, 3 * 10);
  EXPECT_EQ(tpp.n_tiles(), 3 * 10 + n);
  EXPECT_EQ(relay.n_tiles(), tpp.n_tiles());
  EXPECT_EQ(tpp.chunk_id.size(), size_t(3 * 10 * 8 + n * 2));
  EXPECT_EQ(windows_by_task(tpp), windows_by_task(per));
  EXPECT_EQ(tpp.merge_task.size(), size_t(n * 8));
}

// Relay shares only what every sequence holds; two-phase partition also what
// some do.
TEST(TilePlan, RelaySharesOnlyTheWholeBatchsWindows) {
  const KvLayout L{1, 1, 64, 64, KvType::kBF16};
  HostTree t(L, L.chunk_bytes() * 64);
  for (SeqId s = 0; s < 4; ++s) {
    std::vector<int32_t> prompt(64, 1);                         // one chunk everyone holds
    prompt.insert(prompt.end(), 64, s < 2 ? 2 : 3);             // one chunk held by two
    prompt.push_back(100 + int32_t(s));
    int m;
    ASSERT_TRUE(t.join(s, prompt, &m).ok());
    ASSERT_TRUE(t.append(s, std::span(prompt).subspan(size_t(m))).ok());
  }
  const AttnPlan plan = plan_attention(t.plan_input(), {}, 1);
  EXPECT_EQ(plan_tiles(plan, AttnPath::kTpp, {64}).shared_tiles, 3);
  EXPECT_EQ(plan_tiles(plan, AttnPath::kRelay, {64}).shared_tiles, 1);
  EXPECT_EQ(plan_tiles(plan, AttnPath::kPerSequence, {64}).shared_tiles, 0);
}

TEST(TilePlan, RefusesWhatTheKernelsCannotRun) {
  const KvLayout L{1, 1, 64, 64, KvType::kF32};
  HostTree t(L, L.chunk_bytes() * 4);
  int m;
  ASSERT_TRUE(t.join(0, std::vector<int32_t>{1, 2, 3}, &m).ok());
  ASSERT_TRUE(t.append(0, std::vector<int32_t>{1, 2, 3}).ok());
  const AttnPlan plan = plan_attention(t.plan_input(), {}, 1);
  try {
    plan_tiles(plan, AttnPath::kTpp);
    FAIL() << "an f32 plan was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention tiles: the KV type must be f16 or bf16");
  }
  const KvLayout H{1, 1, 64, 64, KvType::kF16};
  HostTree th(H, H.chunk_bytes() * 4);
  ASSERT_TRUE(th.join(0, std::vector<int32_t>{1, 2, 3}, &m).ok());
  ASSERT_TRUE(th.append(0, std::vector<int32_t>{1, 2, 3}).ok());
  const AttnPlan ph = plan_attention(th.plan_input(), {}, 1);
  EXPECT_THROW(plan_tiles(ph, AttnPath::kTpp, {32}), Error);
  EXPECT_THROW(plan_tiles(ph, AttnPath::kTpp, {2048}), Error);
}

}  // namespace
}  // namespace cs
