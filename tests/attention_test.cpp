#include "attn/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "attn/block.h"
#include "attn/state.h"
#include "base/f16.h"
#include "base/cpu.h"
#include "base/error.h"
#include "attn_world.h"
#include "omp_threads.h"

namespace cs {
namespace {

using namespace cs::test;

int g_shared_seen = 0;  // shared chunks over all cases: the chunk-first path ran

void check(const Case& c) {
  SCOPED_TRACE(name(c));
  World w(c);
  g_shared_seen += int(w.ctx->shared.size());
  std::vector<float> ref, got;
  attn_reference(*w.tree, w.problem(ref));
  const float tol = c.type == KvType::kF32 ? 1e-5f : 2e-3f;
  const Isa hw = cpu_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (int(isa) > int(hw)) continue;
    set_isa_for_testing(isa);
    std::vector<float> per, tpp, relay;
    attn_per_sequence(w.problem(per));
    attn_tpp(w.problem(tpp));
    attn_relay(w.problem(relay));
    EXPECT_LT(max_diff(per, ref), tol) << "per-sequence, " << isa_name(isa);
    EXPECT_LT(max_diff(tpp, ref), tol) << "tpp, " << isa_name(isa);
    EXPECT_LT(max_diff(relay, ref), tol) << "relay, " << isa_name(isa);
    EXPECT_LT(max_diff(tpp, per), tol);
    // Two-phase partition does each row's arithmetic exactly as per-sequence
    // does: shared runs are split by sequences, never by chunks, and a
    // shallower prefix's run is continued by the deeper runs nested in it.
    EXPECT_EQ(tpp, per) << "tpp vs per-sequence, " << isa_name(isa) << (single_run(*w.ctx) ? "" : " (nested runs)");
    EXPECT_LT(max_diff(relay, tpp), tol);
  }
  set_isa_for_testing(hw);
}

TEST(Attention, RandomTreesAgreeWithReference) {
  uint32_t seed = 1;
  for (int d : {64, 96, 128, 256})
    for (int group : {1, 3, 4, 8})
      for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16})
        check({1 + int(seed * 37 % 24), 1 + int(seed % 2), group, d, type, seed++});
}

// Sliding windows (Gemma 3's local layers): each row sees only the keys of
// the last `window` positions, in every path and on every ISA; a window
// edge inside a chunk, chunks wholly before every window, windows wider
// than the sequence.
TEST(Attention, SlidingWindowsAgreeWithReference) {
  uint32_t seed = 300;
  for (int window : {1, 37, 64, 100, 200, 1000})
    for (bool prefill : {false, true}) {
      const int d = seed % 4 == 0 ? 256 : seed % 4 == 1 ? 64 : seed % 4 == 2 ? 96 : 128;
      check({1 + int(seed * 37 % 24), 1 + int(seed % 2), 1 + int(seed % 4), d, KvType(seed % 3), seed, prefill, window});
      ++seed;
    }
}

// Attention sinks (gpt-oss: a logit per head in each softmax's denominator)
// enter once, at the end, however the keys were split into parts, pieces and
// relay's system part: every path and ISA agrees with the reference, with
// and without sliding windows, in decode and prefill.
TEST(Attention, SinksAgreeWithReference) {
  uint32_t seed = 500;
  for (int window : {0, 37, 128})
    for (bool prefill : {false, true}) {
      const int d = seed % 2 ? 64 : 128;
      Case c{1 + int(seed * 37 % 24), 1 + int(seed % 2), 1 + int(seed % 4), d, KvType(seed % 3), seed, prefill, window};
      c.sinks = true;
      check(c);
      ++seed;
    }
}

// Soft-capped scores (Gemma 2: cap tanh(s / cap) before the softmax) in
// every path and on every ISA, with a cap near the scores' size (~2) so it
// bends most of them, with and without sliding windows, in decode and
// prefill; two-phase partition keeps per-sequence's bits.
TEST(Attention, SoftCappedScoresAgreeWithReference) {
  uint32_t seed = 700;
  for (int window : {0, 37})
    for (bool prefill : {false, true})
      for (float cap : {1.0f, 5.0f}) {
        const int d = seed % 2 ? 256 : 64;
        Case c{1 + int(seed * 37 % 24), 1 + int(seed % 2), 1 + int(seed % 4), d, KvType(seed % 3), seed, prefill, window};
        c.softcap = cap;
        check(c);
        ++seed;
      }
}

TEST(Attention, LargeBatches) {
  for (int batch : {32, 96}) check({batch, 2, 1, 64, KvType::kF16, 100u + uint32_t(batch)});
}

TEST(Attention, CasesExerciseSharing) {
  g_shared_seen = 0;
  check({32, 2, 1, 64, KvType::kF32, 7});
  check({48, 1, 4, 128, KvType::kF16, 8});
  EXPECT_GT(g_shared_seen, 4);
}

// One system prompt shared by every sequence, private suffixes: two-phase and
// per-sequence agree bit for bit (the property that makes sharing exact).
// With a 256-token prompt (four whole chunks) every third sequence has no
// private token, so phase two has nothing to walk for it: its output is its
// phase-one partial, merged into an empty state.
TEST(Attention, OneSharedPrefixIsBitExact) {
  for (int sys_len : {200, 256})
  for (KvType type : {KvType::kF32, KvType::kF16}) {
    const KvLayout L{1, 2, 64, 64, type};
    HostTree t(L, L.chunk_bytes() * 64);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<int32_t> sys(static_cast<size_t>(sys_len));
    for (auto& x : sys) x = int32_t(rng() % 100);
    for (SeqId s = 0; s < 12; ++s) {
      std::vector<int32_t> prompt = sys;
      const int own = sys_len % 64 == 0 && s % 3 == 0 ? 0 : int(s) * 7 + 1;
      for (int i = 0; i < own; ++i) prompt.push_back(1000 + int32_t(s));
      int m;
      ASSERT_TRUE(t.join(s, prompt, &m).ok());
      ASSERT_TRUE(t.append(s, std::span(prompt).subspan(size_t(m))).ok());
      write_random_kv(t, s, m, int(prompt.size()), rng, nd);
    }
    const auto ctx = t.context();
    ASSERT_TRUE(single_run(*ctx));
    std::vector<float> q(12 * 4 * 64);
    for (auto& x : q) x = nd(rng);
    Planned run(t, {}, 4);
    std::vector<float> per(q.size()), tpp(q.size());
    attn_per_sequence(run.problem(q.data(), per.data()));
    attn_tpp(run.problem(q.data(), tpp.data()));
    EXPECT_EQ(tpp, per) << kv_type_name(type) << " system prompt " << sys_len;
  }
}

TEST(Attention, PrefillRowsAreCausal) {
  for (uint32_t s = 0; s < 6; ++s) check({1 + int(s * 5), 1, 1 + int(s % 4), s % 2 ? 128 : 64, KvType(s % 3), 200 + s, true});
}

// A long prefill of one or two sequences: per-sequence attention cuts each
// sequence's query tokens into slices over the threads (more slices with more
// threads). Every row must come out with the same bits whatever the slicing,
// and match the reference.
TEST(Attention, LongPrefillSlicesAreExact) {
  struct Shape {
    int kv_heads, group, d, seqs;
    KvType type;
  };
  for (const Shape& sh : {Shape{3, 3, 64, 1, KvType::kF16}, Shape{1, 1, 128, 1, KvType::kF32},
                          Shape{2, 4, 64, 2, KvType::kBF16}}) {
    SCOPED_TRACE("kv_heads " + std::to_string(sh.kv_heads) + " seqs " + std::to_string(sh.seqs));
    const KvLayout L{1, sh.kv_heads, sh.d, 64, sh.type};
    HostTree t(L, L.chunk_bytes() * 32);
    std::mt19937 rng(17);
    std::normal_distribution<float> nd;
    std::vector<int> q_begin{0};
    for (int s = 0; s < sh.seqs; ++s) {  // 190 or 450 tokens, the last 150 or 300 as queries
      std::vector<int32_t> prompt(size_t(190 + 260 * s));
      for (auto& x : prompt) x = int32_t(100 * s + rng() % 50);
      int m;
      ASSERT_TRUE(t.join(s, prompt, &m).ok());
      ASSERT_TRUE(t.append(s, std::span(prompt).subspan(size_t(m))).ok());
      write_random_kv(t, s, m, int(prompt.size()), rng, nd);
      q_begin.push_back(q_begin.back() + 150 * (s + 1));
    }
    const auto ctx = t.context();
    ASSERT_TRUE(ctx->shared.empty());
    const int n_heads = sh.kv_heads * sh.group;
    std::vector<float> q(size_t(q_begin.back()) * n_heads * sh.d);
    for (auto& x : q) x = nd(rng);
    std::vector<float> ref(q.size()), first;
    attn_reference(t, Planned(t, q_begin, n_heads).problem(q.data(), ref.data()));
    const SavedOmpThreads saved;
    for (int n : {1, 2, 3, 4}) {
      omp_set_num_threads(n);
      Planned run(t, q_begin, n_heads);  // planned for n threads
      for (bool tpp : {false, true}) {
        std::vector<float> got(q.size(), NAN);
        const AttnProblem p = run.problem(q.data(), got.data());
        tpp ? attn_tpp(p) : attn_per_sequence(p);
        EXPECT_LT(max_diff(got, ref), sh.type == KvType::kF32 ? 1e-5f : 2e-3f) << n << " threads";
        if (first.empty()) first = got;
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * 4), 0) << n << " threads, tpp " << tpp;
      }
    }
  }
}

// A decode step with a draft: one sequence's last few tokens as queries
// (speculative decoding's rows). With fewer items than threads they are cut
// into slices of a few rows; every row keeps its bits whatever the threads,
// and the last row (which sees every key) has the bits of a plain one-token
// decode of the same context.
TEST(Attention, DraftRowsSlicesAreExact) {
  const KvLayout L{1, 3, 64, 64, KvType::kF16};
  HostTree t(L, L.chunk_bytes() * 16);
  std::mt19937 rng(19);
  std::normal_distribution<float> nd;
  std::vector<int32_t> prompt(300);
  for (auto& x : prompt) x = int32_t(rng() % 50);
  int m;
  ASSERT_TRUE(t.join(0, prompt, &m).ok());
  ASSERT_TRUE(t.append(0, std::span(prompt).subspan(size_t(m))).ok());
  write_random_kv(t, 0, m, int(prompt.size()), rng, nd);
  const int n_heads = 9, d = 64;
  const SavedOmpThreads saved;
  for (int k : {2, 3, 5, 9, 17}) {
    std::vector<int> q_begin{0, k};
    std::vector<float> q(size_t(k) * n_heads * d);
    for (auto& x : q) x = nd(rng);
    std::vector<float> ref(q.size()), first;
    attn_reference(t, Planned(t, q_begin, n_heads).problem(q.data(), ref.data()));
    for (int n : {1, 2, 3, 4}) {
      omp_set_num_threads(n);
      Planned run(t, q_begin, n_heads);
      for (bool tpp : {false, true}) {
        std::vector<float> got(q.size(), NAN);
        const AttnProblem p = run.problem(q.data(), got.data());
        tpp ? attn_tpp(p) : attn_per_sequence(p);
        EXPECT_LT(max_diff(got, ref), 2e-3f) << k << " rows, " << n << " threads";
        if (first.empty()) first = got;
        EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * 4), 0) << k << " rows, " << n << " threads";
      }
      std::vector<float> one(size_t(n_heads) * d, NAN);
      const std::vector<int> one_begin{0, 1};
      Planned lone(t, one_begin, n_heads);
      attn_per_sequence(lone.problem(q.data() + size_t(k - 1) * n_heads * d, one.data()));
      EXPECT_EQ(std::memcmp(one.data(), first.data() + size_t(k - 1) * n_heads * d, one.size() * 4), 0)
          << k << " rows, " << n << " threads: the last row differs from a one-token decode";
    }
  }
}

// Walks longer than a part (32 chunks) are cut into parts merged in depth
// order by every path. Five sequences share a 45-chunk-and-a-bit prefix and
// own 0-33 chunks each (up to 3 parts). Per-sequence and two-phase attention
// over the shared tree, and per-sequence attention over each sequence alone
// in a tree of its own (a lone decode, whose parts run as separate items),
// must give the same bits on 1-3 threads, and match the reference.
TEST(Attention, LongWalksArePartedExactly) {
  struct Shape {
    int kv_heads, group, d;
    KvType type;
    int window = 0;  // sliding: whole parts before a row's window, an edge inside one
  };
  for (const Shape sh : {Shape{3, 3, 64, KvType::kF16}, Shape{2, 1, 128, KvType::kF32},
                         Shape{1, 4, 256, KvType::kF16, 700}, Shape{3, 3, 64, KvType::kBF16, 2500}}) {
    SCOPED_TRACE(std::to_string(sh.kv_heads) + " KV heads, d " + std::to_string(sh.d) + " " + kv_type_name(sh.type) +
                 " window " + std::to_string(sh.window));
    const KvLayout L{1, sh.kv_heads, sh.d, 64, sh.type};
    constexpr int kShared = 45 * 64 + 20, kSeqs = 5;
    const int own[kSeqs] = {0, 1, 100, 1000, 2100};
    // K/V of a token depend only on its position, or on (sequence, position)
    // past the shared prefix, so every tree holds the same values.
    auto fill = [&](HostTree& t, SeqId id, int from, int to) {
      std::vector<float> k(size_t(sh.d)), v(size_t(sh.d));
      for (int i = from; i < to; ++i) {
        std::mt19937 rng(uint32_t(i < kShared ? i : 100000 * (id + 1) + i));
        std::normal_distribution<float> nd;
        for (int h = 0; h < sh.kv_heads; ++h) {
          for (int x = 0; x < sh.d; ++x) k[size_t(x)] = nd(rng), v[size_t(x)] = nd(rng);
          t.write_kv(id, i, 0, h, k.data(), v.data());
        }
      }
    };
    auto prompt_of = [&](int s) {
      std::vector<int32_t> pr(size_t(kShared), 3);
      for (int i = 0; i < own[s]; ++i) pr.push_back(100 + s);
      return pr;
    };
    auto add = [&](HostTree& t, int s) {
      const auto pr = prompt_of(s);
      int m;
      ASSERT_TRUE(t.join(SeqId(s), pr, &m).ok());
      ASSERT_TRUE(t.append(SeqId(s), std::span(pr).subspan(size_t(m))).ok());
      fill(t, SeqId(s), m, int(pr.size()));
    };
    const int n_heads = sh.kv_heads * sh.group;
    std::vector<float> q(size_t(kSeqs * n_heads * sh.d));
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (auto& x : q) x = nd(rng) * 2;
    HostTree all(L, L.chunk_bytes() * 160);
    for (int s = 0; s < kSeqs; ++s) add(all, s);
    const auto ctx = all.context();
    ASSERT_TRUE(single_run(*ctx));
    ASSERT_EQ(ctx->seqs, (std::vector<SeqId>{0, 1, 2, 3, 4}));
    std::vector<float> ref(q.size()), first;
    auto planned = [&](HostTree& t) {
      auto p = std::make_unique<Planned>(t, std::vector<int>{}, n_heads);
      if (sh.window) p->set_window(sh.window);
      return p;
    };
    attn_reference(all, planned(all)->problem(q.data(), ref.data()));
    const size_t row = size_t(n_heads * sh.d);
    std::vector<std::unique_ptr<HostTree>> lone;
    for (int s = 0; s < kSeqs; ++s) {
      lone.push_back(std::make_unique<HostTree>(L, L.chunk_bytes() * 128));
      add(*lone.back(), s);
    }
    const SavedOmpThreads saved;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> per(q.size()), tpp(q.size()), alone(q.size());
      const auto run = planned(all);
      attn_per_sequence(run->problem(q.data(), per.data()));
      attn_tpp(run->problem(q.data(), tpp.data()));
      for (int s = 0; s < kSeqs; ++s) {
        const auto one = planned(*lone[size_t(s)]);
        attn_per_sequence(one->problem(q.data() + size_t(s) * row, alone.data() + size_t(s) * row));
      }
      EXPECT_LT(max_diff(per, ref), sh.type == KvType::kF32 ? 1e-5f : 2e-3f) << threads << " threads";
      EXPECT_EQ(tpp, per) << "two-phase vs per-sequence, " << threads << " threads";
      EXPECT_EQ(alone, per) << "alone vs in the batch, " << threads << " threads";
      if (first.empty()) first = per;
      EXPECT_EQ(per, first) << threads << " threads vs 1";
    }
  }
}

// Prompt Cache's modules: pinned chunks read by detached sequences wherever
// they sit in their chunk lists (after own chunks, partially filled ones, at
// different depths), beside ordinary tree sequences. Every path agrees with
// the reference (which finds each key by walking the sequence's chunks, not
// by the plan's offsets), and two-phase partition batches a module's chunks
// across all of its readers in one chunk-first run (on 2 threads: with many,
// runs are split by their readers until each thread has work).
TEST(Attention, ModulesAreBatchedWhereverTheySit) {
  SavedOmpThreads saved;
  omp_set_num_threads(2);
  for (bool prefill : {false, true})
    for (KvType type : {KvType::kF32, KvType::kF16}) {
      SCOPED_TRACE(std::string(kv_type_name(type)) + (prefill ? " prefill" : " decode"));
      const KvLayout L{1, 2, 64, 64, type};
      HostTree t(L, L.chunk_bytes() * 64);
      std::mt19937 rng(21);
      std::normal_distribution<float> nd;
      std::vector<float> k(64), v(64);
      auto fill = [&](ChunkId c, int n) {
        for (int i = 0; i < n; ++i)
          for (int h = 0; h < 2; ++h) {
            for (int x = 0; x < 64; ++x) k[size_t(x)] = nd(rng), v[size_t(x)] = nd(rng);
            t.memory().write_kv(c, i, 0, h, k.data(), v.data());
          }
      };
      uint64_t group = 0;
      auto module = [&](int n) {  // pinned chunks of n tokens, the last partial: one group
        std::vector<ChunkId> out;
        ++group;
        for (int done = 0; done < n; done += 64) {
          const std::vector<int32_t> toks(size_t(std::min(64, n - done)), 9);
          out.push_back(t.pin(toks, group));
          fill(out.back(), int(toks.size()));
        }
        return out;
      };
      const auto ma = module(64), mb = module(94), mc = module(20);
      SeqId next = 0;
      auto own = [&](SeqId id, int n) {
        const int from = t.length(id);
        ASSERT_TRUE(t.append(id, std::vector<int32_t>(size_t(n), 7)).ok());
        write_random_kv(t, id, from, from + n, rng, nd);
      };
      auto detached = [&](std::initializer_list<std::pair<const std::vector<ChunkId>*, int>> parts) {
        const SeqId id = next++;
        ASSERT_TRUE(t.join_detached(id).ok());
        for (auto [mod, n] : parts) {
          if (mod) ASSERT_TRUE(t.attach_pinned(id, *mod).ok());
          else own(id, n);
        }
      };
      detached({{&ma, 0}, {nullptr, 40}, {&mb, 0}, {nullptr, 10}});
      detached({{nullptr, 5}, {&mb, 0}, {nullptr, 70}});
      detached({{&ma, 0}, {&mc, 0}, {nullptr, 3}});
      detached({{&mc, 0}, {&mb, 0}, {nullptr, 1}});
      for (int i = 0; i < 2; ++i) {  // two tree sequences sharing 130 tokens
        const SeqId id = next++;
        std::vector<int32_t> prompt(130, 3);
        prompt.push_back(500 + i);
        int m;
        ASSERT_TRUE(t.join(id, prompt, &m).ok());
        ASSERT_TRUE(t.append(id, std::span(prompt).subspan(size_t(m))).ok());
        write_random_kv(t, id, m, int(prompt.size()), rng, nd);
      }
      const auto ctx = t.context();
      std::vector<int> q_begin;
      int rows = 0;
      for (size_t i = 0; i < ctx->seqs.size(); ++i) {
        q_begin.push_back(rows);
        rows += prefill ? 1 + int(i % 3) : 1;
      }
      q_begin.push_back(rows);
      if (!prefill) q_begin.clear();
      const int n_heads = 4;
      std::vector<float> q(size_t(rows) * n_heads * 64);
      for (auto& x : q) x = nd(rng);
      Planned run(t, q_begin, n_heads);
      // mb's first chunk is read by sequences 0, 1, 3 at depths 2, 1, 1 (in
      // context order the tree sequences come first).
      bool batched = false;
      for (int r = 0; r < run.plan.tpp.n_runs(); ++r)
        for (ChunkId c : run.plan.tpp.chunks(r)) batched = batched || (c == mb[0] && run.plan.tpp.readers(r).size() >= 2);
      EXPECT_TRUE(batched) << "the module's chunks were not batched by the chunk-first phase";
      std::vector<float> ref(q.size()), per(q.size()), tpp(q.size()), relay(q.size());
      attn_reference(t, run.problem(q.data(), ref.data()));
      attn_per_sequence(run.problem(q.data(), per.data()));
      attn_tpp(run.problem(q.data(), tpp.data()));
      attn_relay(run.problem(q.data(), relay.data()));
      const float tol = type == KvType::kF32 ? 1e-5f : 2e-3f;
      EXPECT_LT(max_diff(per, ref), tol);
      EXPECT_LT(max_diff(tpp, ref), tol);
      EXPECT_LT(max_diff(relay, ref), tol);
      if (prefill) continue;
      // Exactness: each sequence alone (its modules then read by it only)
      // gets the very bits it gets batched with the other readers, by either
      // path: every pinned chunk is a part of its own, folded from an empty
      // state and merged in order, batched or not.
      EXPECT_EQ(tpp, per);
      const size_t row = size_t(n_heads) * 64;
      for (size_t i = 0; i < ctx->seqs.size(); ++i) {
        auto one = std::make_shared<KernelContext>();
        one->seqs = {ctx->seqs[i]};
        one->chunks.assign(ctx->chunks.begin() + ctx->chunk_begin[i], ctx->chunks.begin() + ctx->chunk_begin[i + 1]);
        one->chunk_begin = {0, int(one->chunks.size())};
        one->private_from = {int(one->chunks.size())};
        Planned alone(t, one, n_heads);
        std::vector<float> out(row);
        attn_per_sequence(alone.problem(q.data() + i * row, out.data()));
        EXPECT_EQ(std::memcmp(out.data(), tpp.data() + i * row, row * 4), 0) << "sequence " << i << " alone vs batched";
      }
    }
}

// Edge shapes: one sequence; no shared chunk; sequences living entirely in
// shared chunks (empty private part).
TEST(Attention, EdgeShapes) {
  for (KvType type : {KvType::kF32, KvType::kF16}) {
    const KvLayout L{1, 1, 64, 64, type};
    HostTree t(L, L.chunk_bytes() * 16);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const std::vector<int32_t> prompt(128, 5);  // two full chunks
    int m;
    ASSERT_TRUE(t.join(0, prompt, &m).ok());
    ASSERT_TRUE(t.append(0, prompt).ok());
    write_random_kv(t, 0, 0, 128, rng, nd);
    ASSERT_TRUE(t.join(1, prompt, &m).ok());  // shares both chunks, nothing private
    EXPECT_EQ(m, 128);
    ASSERT_TRUE(t.join(2, std::vector<int32_t>{9}, &m).ok());  // shares nothing
    ASSERT_TRUE(t.append(2, std::vector<int32_t>{9}).ok());
    write_random_kv(t, 2, 0, 1, rng, nd);
    const auto ctx = t.context();
    EXPECT_EQ(ctx->shared.size(), 2u);
    std::vector<float> q(3 * 64);
    for (auto& x : q) x = nd(rng);
    for (int n : {1, 3}) {  // the first sequence alone, then all three
      auto one = std::make_shared<KernelContext>(*ctx);
      if (n == 1) {
        one->seqs.resize(1);
        one->chunk_begin.resize(2);
        one->shared.clear();
      }
      Planned run(t, one, 1);
      std::vector<float> ref(size_t(n) * 64), tpp(ref.size()), relay(ref.size()), per(ref.size());
      attn_reference(t, run.problem(q.data(), ref.data()));
      attn_tpp(run.problem(q.data(), tpp.data()));
      attn_relay(run.problem(q.data(), relay.data()));
      attn_per_sequence(run.problem(q.data(), per.data()));
      const float tol = type == KvType::kF32 ? 1e-5f : 2e-3f;
      EXPECT_LT(max_diff(tpp, ref), tol);
      EXPECT_LT(max_diff(relay, ref), tol);
      EXPECT_LT(max_diff(per, ref), tol);
    }
  }
}

// A step with no sequence (an empty batch) is a no-op on every path.
TEST(Attention, NoSequenceIsANoOp) {
  const KvLayout L{1, 3, 64, 64, KvType::kF16};
  HostTree t(L, L.chunk_bytes() * 2);
  const auto ctx = t.context();
  ASSERT_TRUE(ctx->seqs.empty());
  float q = 1.0f, out = 7.0f;
  Planned run(t, {}, 9);
  const AttnProblem p = run.problem(&q, &out);
  attn_per_sequence(p);
  attn_tpp(p);
  attn_relay(p);
  attn_reference(t, p);
  EXPECT_EQ(out, 7.0f);
}

TEST(Attention, UnsupportedShapesAreErrors) {
  for (KvLayout L : {KvLayout{1, 1, 64, 32, KvType::kF32}, KvLayout{1, 1, 80, 64, KvType::kF32}}) {
    HostTree t(L, L.chunk_bytes() * 2);
    Planned run(t, {}, 1);
    const AttnProblem p = run.problem(nullptr, nullptr);
    EXPECT_THROW(attn_tpp(p), Error);
    EXPECT_THROW(attn_per_sequence(p), Error);
    EXPECT_THROW(attn_relay(p), Error);
  }
}

TEST(Merge, TwoHalvesEqualTheWhole) {
  // softmax over scores {1, 2} and {3}: merging the two partial states must
  // give the state of all three.
  const float v[3][2] = {{1, 0}, {0, 1}, {2, 2}};
  auto state = [&](std::initializer_list<int> idx, const float* s) {
    float m = -INFINITY;
    for (int i : idx) m = std::max(m, s[i]);
    std::vector<float> o(2, 0);
    float l = 0;
    for (int i : idx) {
      const float w = std::exp(s[i] - m);
      l += w;
      o[0] += w * v[i][0], o[1] += w * v[i][1];
    }
    return std::tuple{o, m, l};
  };
  const float s[3] = {1, 2, 3};
  auto [oa, ma, la] = state({0, 1}, s);
  auto [ob, mb, lb] = state({2}, s);
  auto [ow, mw, lw] = state({0, 1, 2}, s);
  merge({oa.data(), &ma, &la}, ob.data(), mb, lb, 2);
  float out[2], want[2];
  finalize(oa.data(), ma, la, 2, out);
  finalize(ow.data(), mw, lw, 2, want);
  EXPECT_NEAR(out[0], want[0], 1e-6);
  EXPECT_NEAR(out[1], want[1], 1e-6);
  EXPECT_NEAR(lse_of(ma, la), lse_of(mw, lw), 1e-6);
  // The log-sum-exp form merges the same way (relay fusion).
  auto [oa2, ma2, la2] = state({0, 1}, s);
  float na[2];
  finalize(oa2.data(), ma2, la2, 2, na);
  float m1, l1;
  state_from_lse(lse_of(ma2, la2), &m1, &l1);
  std::vector<float> o1(na, na + 2);
  merge({o1.data(), &m1, &l1}, ob.data(), mb, lb, 2);
  finalize(o1.data(), m1, l1, 2, out);
  EXPECT_NEAR(out[0], want[0], 1e-6);
  EXPECT_NEAR(out[1], want[1], 1e-6);
}

// The block kernel on one chunk, two folds in a row (so the running max
// moves and o is rescaled), with random visible limits (0 included) and
// window edges (a row's first visible key, sliding windows), soft-capped
// scores for even row counts (Gemma 2, a cap of 2 over scores of std 1-4): every
// row agrees with the scalar kernel, and gets the very same bits whether it
// is computed in a batch of nq rows or alone. The second property is what
// makes two-phase partition bit-identical to per-sequence attention.
TEST(Block, RowsAgreeWithScalarAndDoNotDependOnTheBatch) {
  const Isa hw = cpu_isa();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (int type = 0; type < 3; ++type)
    for (int d : {64, 96, 128, 256})
      for (int c : {64, 128})
        for (int nq : {1, 3, 5, 8, 16, 17, 33, 70}) {
          const int esz = int(kv_type_size(KvType(type)));
          std::vector<uint8_t> kt[2], v[2];
          for (int b = 0; b < 2; ++b) {
            kt[b].resize(size_t(c) * d * esz);
            v[b].resize(kt[b].size());
            for (auto* buf : {&kt[b], &v[b]})
              for (size_t i = 0; i < buf->size() / esz; ++i) store_kv_elem(buf->data() + i * esz, type, nd(rng) * (b + 1));
          }
          std::vector<float> q(size_t(nq) * d);
          for (auto& x : q) x = nd(rng);
          std::vector<int> limit(static_cast<size_t>(nq));
          for (auto& x : limit) x = int(rng() % 4) == 0 ? 0 : int(rng() % uint32_t(c)) + 1;
          std::vector<int> first(static_cast<size_t>(nq), 0);
          for (int r = 0; r < nq; ++r)
            if (limit[size_t(r)] > 0 && rng() % 2) first[size_t(r)] = int(rng() % uint32_t(limit[size_t(r)]));
          // Runs rows [r0, r0 + n) through both chunks with the current ISA.
          void (*kernel)(const BlockJob&) = block_update;
          auto run = [&](int r0, int n, std::vector<float>& o, std::vector<float>& m, std::vector<float>& l) {
            o.assign(size_t(n) * d, 0.0f);
            m.assign(size_t(n), -INFINITY);
            l.assign(size_t(n), 0.0f);
            for (int b = 0; b < 2; ++b) {
              BlockJob j;
              j.q = q.data() + size_t(r0) * d;
              j.q_stride = d;
              j.nq = n;
              j.kt = kt[b].data();
              j.v = v[b].data();
              j.kv_type = type;
              j.c = c;
              j.d = d;
              j.limit = limit.data() + r0;
              j.first = first.data() + r0;
              j.scale = 0.125f;
              j.softcap = nq % 2 ? 0.0f : 2.0f;
              j.o = o.data();
              j.o_stride = d;
              j.m = m.data();
              j.l = l.data();
              j.next_kt = kt[1 - b].data();  // a prefetch hint changes nothing
              j.next_v = v[1 - b].data();
              kernel(j);
            }
          };
          std::vector<float> o_ref, m_ref, l_ref;
          set_isa_for_testing(Isa::kScalar);
          run(0, nq, o_ref, m_ref, l_ref);
          // The AVX2 kernel twice: as dispatched, and forced onto the shared
          // fp32 copy of fp16/bf16 K/V that only AVX-512 picks, so that path
          // is checked on any CPU with AVX2.
          const struct {
            Isa isa;
            void (*fn)(const BlockJob&);
            const char* name;
          } variants[] = {{Isa::kAvx2, block_update, "avx2"},
                          {Isa::kAvx2, block_update_avx2_shared_copy, "avx2 shared copy"},
                          {Isa::kAvx512, block_update, "avx512"}};
          for (const auto& var : variants) {
            const Isa isa = var.isa;
            if (int(isa) > int(hw)) continue;
            set_isa_for_testing(isa);
            kernel = var.fn;
            const std::string at = std::string(var.name) + " type " + std::to_string(type) + " d " +
                                   std::to_string(d) + " c " + std::to_string(c) + " nq " + std::to_string(nq) +
                                   (nq % 2 ? "" : " softcap 2");
            std::vector<float> o, m, l, o1, m1, l1;
            run(0, nq, o, m, l);
            for (int r = 0; r < nq; ++r) {
              if (limit[size_t(r)] == 0) {  // saw no key: the empty state
                ASSERT_EQ(m[size_t(r)], -INFINITY) << at;
                ASSERT_EQ(l[size_t(r)], 0.0f) << at;
              } else {
                ASSERT_NEAR(m[size_t(r)], m_ref[size_t(r)], 1e-5f * (1 + std::fabs(m_ref[size_t(r)]))) << at;
                ASSERT_NEAR(l[size_t(r)], l_ref[size_t(r)], 1e-5 * l_ref[size_t(r)]) << at;
              }
              for (int x = 0; x < d && limit[size_t(r)] > 0; ++x)
                ASSERT_NEAR(o[size_t(r) * d + x] / l[size_t(r)], o_ref[size_t(r) * d + x] / l_ref[size_t(r)], 1e-5)
                    << at << " row " << r;
              run(r, 1, o1, m1, l1);
              ASSERT_EQ(m1[0], m[size_t(r)]) << at << " row " << r;
              ASSERT_EQ(l1[0], l[size_t(r)]) << at << " row " << r;
              for (int x = 0; x < d; ++x) ASSERT_EQ(o1[size_t(x)], o[size_t(r) * d + x]) << at << " row " << r;
            }
          }
          set_isa_for_testing(hw);
        }
}

// Scores hundreds apart: weights that underflow come out exactly 0, never
// NaN, on every ISA (the vector exp has no clamp; masked keys are a finite
// sentinel), and a later chunk whose max is far higher wipes the old state.
TEST(Block, ScoresFarBelowTheMaxGetZeroWeight) {
  const Isa hw = cpu_isa();
  const int d = 64, c = 64;
  const float key0[2][4] = {{0, -300, -95, -1e6f}, {400, 0, -50, 0}};
  std::vector<float> kt[2], v[2];
  for (int b = 0; b < 2; ++b) {
    kt[b].assign(size_t(c) * d, 0.0f);
    v[b].assign(size_t(c) * d, 0.0f);
    for (int t = 0; t < c; ++t) {
      kt[b][size_t(t)] = t < 4 ? key0[b][t] : -1000.0f;  // K^T row 0: the score of key t (q = e_0)
      for (int x = 0; x < d; ++x) v[b][size_t(t) * d + x] = float(b * 1000 + t * 10 + x % 7 + 1);
    }
  }
  const int nq = 3;
  std::vector<float> q(size_t(nq) * d, 0.0f);
  for (int r = 0; r < nq; ++r) q[size_t(r) * d] = 1.0f;
  const int limits[2][nq] = {{3, 64, 0}, {2, 64, 1}};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (int(isa) > int(hw)) continue;
    set_isa_for_testing(isa);
    std::vector<float> o(size_t(nq) * d, 0.0f), m(nq, -INFINITY), l(nq, 0.0f);
    for (int b = 0; b < 2; ++b) {
      BlockJob j;
      j.q = q.data();
      j.q_stride = d;
      j.nq = nq;
      j.kt = reinterpret_cast<const uint8_t*>(kt[b].data());
      j.v = reinterpret_cast<const uint8_t*>(v[b].data());
      j.c = c;
      j.d = d;
      j.limit = limits[b];
      j.o = o.data();
      j.o_stride = d;
      j.m = m.data();
      j.l = l.data();
      block_update(j);
      // After chunk 0: rows 0 and 1 have max 0 and weights {1, 0, exp(-95)};
      // row 2 saw nothing. After chunk 1 every row's max is 400 (row 2: key
      // 0 only), all earlier weight is gone and the output is V[1] row 0.
      for (int r = 0; r < nq; ++r) {
        const std::string at = std::string(isa_name(isa)) + " chunk " + std::to_string(b) + " row " + std::to_string(r);
        if (b == 0 && r == 2) {
          EXPECT_EQ(m[size_t(r)], -INFINITY) << at;
          EXPECT_EQ(l[size_t(r)], 0.0f) << at;
          continue;
        }
        EXPECT_EQ(m[size_t(r)], b == 0 ? 0.0f : 400.0f) << at;
        EXPECT_EQ(l[size_t(r)], 1.0f) << at;
        for (int x = 0; x < d; ++x) EXPECT_EQ(o[size_t(r) * d + x], float(b * 1000 + x % 7 + 1)) << at << " x " << x;
      }
    }
  }
  set_isa_for_testing(hw);
}

}  // namespace
}  // namespace cs
