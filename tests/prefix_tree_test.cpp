#include "kv/host_tree.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

namespace cs {
namespace {

KvLayout small_layout(KvType type = KvType::kF32, int c = 4) {
  return KvLayout{2, 2, 8, c, type};
}

// K/V of a token depend only on the tokens up to it (as in a real model), so
// sequences sharing a prefix must read identical values. Values are small
// integers / 4, exact in f32, f16 and bf16.
void kv_of(const std::vector<int32_t>& prefix, int layer, int head, int d, float* k, float* v) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : prefix) h = (h ^ uint64_t(t)) * 1099511628211ull;
  h ^= uint64_t(layer * 31 + head) * 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < d; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    k[i] = float(int((h >> 33) % 255) - 127) / 4;
    v[i] = float(int((h >> 41) % 255) - 127) / 4;
  }
}

// Appends tokens and writes their K/V like the model would. False (and no
// change) when the pool is exhausted.
bool try_append_with_kv(HostTree& t, SeqId id, std::vector<int32_t>& toks,
                        std::span<const int32_t> add) {
  const KvStatus st = t.append(id, add);
  if (!st.ok()) {
    EXPECT_EQ(st.code, KvCode::kPoolExhausted);
    return false;
  }
  const KvLayout& L = t.layout();
  std::vector<float> k(size_t(L.head_dim)), v(k.size());
  for (int32_t x : add) {
    toks.push_back(x);
    for (int l = 0; l < L.n_layers; ++l)
      for (int h = 0; h < L.n_kv_heads; ++h) {
        kv_of(toks, l, h, L.head_dim, k.data(), v.data());
        t.write_kv(id, int(toks.size()) - 1, l, h, k.data(), v.data());
      }
  }
  return true;
}

void append_with_kv(HostTree& t, SeqId id, std::vector<int32_t>& toks, std::span<const int32_t> add) {
  ASSERT_TRUE(try_append_with_kv(t, id, toks, add));
}

void expect_reads_back(const HostTree& t, SeqId id, const std::vector<int32_t>& toks) {
  const KvLayout& L = t.layout();
  ASSERT_EQ(t.length(id), int(toks.size()));
  std::vector<float> k(size_t(L.head_dim)), v(k.size()), ek(k.size()), ev(k.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    const auto [chunk, off] = t.slot(id, int(i));
    ASSERT_EQ(t.chunk_tokens(chunk)[size_t(off)], toks[i]) << "seq " << id << " token " << i;
    const std::vector<int32_t> prefix(toks.begin(), toks.begin() + long(i) + 1);
    for (int l = 0; l < L.n_layers; ++l)
      for (int h = 0; h < L.n_kv_heads; ++h) {
        t.read_kv(id, int(i), l, h, k.data(), v.data());
        kv_of(prefix, l, h, L.head_dim, ek.data(), ev.data());
        ASSERT_EQ(k, ek) << "seq " << id << " token " << i << " layer " << l << " head " << h;
        ASSERT_EQ(v, ev);
      }
  }
}

std::vector<int32_t> range(int from, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = from + i;
  return v;
}

TEST(ChunkPool, AllocateFreeAndAccounting) {
  const KvLayout L = small_layout();
  EXPECT_EQ(L.chunk_bytes(), size_t(2 * 2 * 2 * 4 * 8 * 4));
  ChunkPool pool(L, L.chunk_bytes() * 3 + 5);
  EXPECT_EQ(pool.capacity(), 3);
  EXPECT_EQ(L.chunks_in(L.chunk_bytes() * 3 + 5), 3);
  ChunkIds ids(pool.capacity());
  const ChunkId a = ids.allocate(), b = ids.allocate(), c = ids.allocate();
  EXPECT_GE(a, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(ids.allocate(), -1);
  EXPECT_EQ(ids.used_count(), 3);
  ids.release(b);
  EXPECT_EQ(ids.free_count(), 1);
  EXPECT_EQ(ids.allocate(), b);
  EXPECT_EQ(ids.peak_used(), 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.block(c, 1, 1, true)) % 64, 0u);
}

TEST(HostTree, JoinSharesFullChunksAndCopiesPartialMatch) {
  HostTree t(small_layout(), small_layout().chunk_bytes() * 64);
  std::vector<int32_t> a, b;
  int matched = -1;
  ASSERT_TRUE(t.join(1, {}, &matched).ok());
  EXPECT_EQ(matched, 0);
  append_with_kv(t, 1, a, range(0, 10));  // chunks [0-3] [4-7] [8,9]
  const auto prompt = std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 99};
  ASSERT_TRUE(t.join(2, prompt, &matched).ok());
  EXPECT_EQ(matched, 7);  // one full shared chunk + 3 tokens copied
  b.assign(prompt.begin(), prompt.begin() + 7);
  EXPECT_EQ(t.chunks_of(2)[0], t.chunks_of(1)[0]);
  EXPECT_NE(t.chunks_of(2)[1], t.chunks_of(1)[1]);
  append_with_kv(t, 2, b, std::vector<int32_t>{99});
  expect_reads_back(t, 1, a);
  expect_reads_back(t, 2, b);
  const KvStats s = t.stats();
  EXPECT_EQ(s.used, 4);  // [0-3] shared, [4-7] and [8,9] of seq 1, [4,5,6,99] of seq 2
  EXPECT_EQ(s.cached, 0);
  EXPECT_EQ(s.free, 60);
}

TEST(HostTree, TypedErrors) {
  HostTree t(small_layout(), small_layout().chunk_bytes() * 2);
  int m;
  EXPECT_EQ(t.append(5, range(0, 1)).code, KvCode::kUnknownSequence);
  EXPECT_EQ(t.leave(5).code, KvCode::kUnknownSequence);
  ASSERT_TRUE(t.join(5, {}, &m).ok());
  EXPECT_EQ(t.join(5, {}, &m).code, KvCode::kSequenceExists);
  const KvStatus full = t.append(5, range(0, 9));  // needs 3 chunks, pool has 2
  EXPECT_EQ(full.code, KvCode::kPoolExhausted);
  EXPECT_EQ(t.length(5), 0);  // nothing changed
  EXPECT_EQ(t.stats().free, 2);
  ASSERT_TRUE(t.append(5, range(0, 8)).ok());
  ASSERT_TRUE(t.leave(5).ok());
  EXPECT_EQ(t.append(5, range(0, 1)).code, KvCode::kSequenceLeft);
  EXPECT_EQ(t.leave(5).code, KvCode::kSequenceLeft);
  EXPECT_EQ(t.fork(5, 6).code, KvCode::kSequenceLeft);
}

TEST(HostTree, RetainedPrefixIsReusedThenEvictedLru) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 4);
  std::vector<int32_t> a;
  int m;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  append_with_kv(t, 1, a, range(100, 10));  // 2 full chunks + partial
  ASSERT_TRUE(t.leave(1).ok());
  KvStats s = t.stats();
  EXPECT_EQ(s.cached, 3);  // the full chunks and the partial tail are retained
  EXPECT_EQ(s.free, 1);
  // Same prefix again: both full chunks are found, and the first token of
  // the partial tail is copied, their K/V intact.
  ASSERT_TRUE(t.join(2, range(100, 9), &m).ok());
  EXPECT_EQ(m, 9);
  std::vector<int32_t> b = range(100, 9);
  expect_reads_back(t, 2, b);
  ASSERT_TRUE(t.leave(2).ok());
  // A different sequence needing all 4 chunks evicts the cached ones.
  std::vector<int32_t> c;
  ASSERT_TRUE(t.join(3, {}, &m).ok());
  append_with_kv(t, 3, c, range(500, 16));
  s = t.stats();
  EXPECT_EQ(s.cached, 0);
  EXPECT_EQ(s.used, 4);
  expect_reads_back(t, 3, c);
}

TEST(HostTree, ForkSharesEverythingAndCopiesTheTailOnWrite) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 16);
  std::vector<int32_t> a;
  int m;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  append_with_kv(t, 1, a, range(0, 6));
  ASSERT_TRUE(t.fork(1, 2).ok());
  ASSERT_TRUE(t.fork(1, 3).ok());
  EXPECT_EQ(t.chunks_of(2), t.chunks_of(1));
  EXPECT_EQ(t.stats().used, 2);
  std::vector<int32_t> b = a, c = a;
  EXPECT_EQ(t.chunks_to_append(2, 1), 1);  // the shared partial tail is copied
  EXPECT_EQ(t.chunks_to_append(2, 3), 2);  // ... and fills, then a new chunk
  EXPECT_EQ(t.chunks_to_append(99, 5), 2);  // an unknown sequence starts empty
  append_with_kv(t, 2, b, std::vector<int32_t>{7});
  append_with_kv(t, 3, c, std::vector<int32_t>{8, 9, 10});
  append_with_kv(t, 1, a, std::vector<int32_t>{6});
  EXPECT_EQ(t.chunks_of(2)[0], t.chunks_of(1)[0]);
  EXPECT_NE(t.chunks_of(2)[1], t.chunks_of(1)[1]);
  expect_reads_back(t, 1, a);
  expect_reads_back(t, 2, b);
  expect_reads_back(t, 3, c);
}

// Speculative decoding's rollback: a sequence cut back to n tokens reads its
// first n as before, grows again from there, and what it let go stays a
// valid cache of the tokens it held.
TEST(HostTree, TruncateCutsTheTailAndKeepsWhatItHeldCached) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 16);
  std::vector<int32_t> a;
  int m;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  append_with_kv(t, 1, a, range(0, 11));  // [0-3] [4-7] [8-10]
  // Inside its last chunk, which only it reads: shortened in place.
  const ChunkId last = t.chunks_of(1)[2];
  ASSERT_TRUE(t.truncate(1, 9).ok());
  a.resize(9);
  EXPECT_EQ(t.length(1), 9);
  ASSERT_EQ(t.chunks_of(1).size(), 3u);
  EXPECT_EQ(t.chunks_of(1)[2], last);
  EXPECT_EQ(t.chunk_length(last), 1);
  expect_reads_back(t, 1, a);
  // Back into the chunk before: [8] is let go (kept, cached, under [4-7]),
  // so [4,5] is a copy of its own and [4-7] stays whole for later prompts.
  const ChunkId second = t.chunks_of(1)[1];
  ASSERT_TRUE(t.truncate(1, 6).ok());
  a.resize(6);
  ASSERT_EQ(t.chunks_of(1).size(), 2u);
  EXPECT_NE(t.chunks_of(1)[1], second);
  EXPECT_EQ(t.chunk_length(second), 4);
  expect_reads_back(t, 1, a);
  EXPECT_EQ(t.stats().cached, 2);  // [4-7] and [8]
  // It grows again from the cut, and a cut at a chunk's end keeps it whole.
  append_with_kv(t, 1, a, std::vector<int32_t>{50, 51, 52});
  expect_reads_back(t, 1, a);
  ASSERT_TRUE(t.truncate(1, 8).ok());
  a.resize(8);
  expect_reads_back(t, 1, a);
  EXPECT_EQ(t.chunks_of(1).size(), 2u);
  // No-op and errors.
  ASSERT_TRUE(t.truncate(1, 8).ok());
  EXPECT_EQ(t.truncate(1, 9).code, KvCode::kInvalid);
  EXPECT_EQ(t.truncate(1, -1).code, KvCode::kInvalid);
  EXPECT_EQ(t.truncate(7, 0).code, KvCode::kUnknownSequence);
  // Whole full chunks let go are retained: a later prompt with those tokens shares them.
  append_with_kv(t, 1, a, range(60, 8));  // [0-3] [4,5,50,51] [60-63] [64-67]
  const std::vector<int32_t> full = a;
  const int cached = t.stats().cached;
  ASSERT_TRUE(t.truncate(1, 8).ok());
  a.resize(8);
  expect_reads_back(t, 1, a);
  EXPECT_EQ(t.stats().cached, cached + 2);
  ASSERT_TRUE(t.join(2, full, &m).ok());
  EXPECT_EQ(m, 16);
  expect_reads_back(t, 2, full);
  // To nothing at all.
  ASSERT_TRUE(t.truncate(1, 0).ok());
  EXPECT_TRUE(t.chunks_of(1).empty());
  a.clear();
  append_with_kv(t, 1, a, range(90, 5));
  expect_reads_back(t, 1, a);
}

// What another sequence wrote after the same text: speculative decoding's
// drafts from the tree.
TEST(HostTree, ContinuationIsWhatTheTreeHoldsAfterTheText) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 16);
  std::vector<int32_t> a;
  int m;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  append_with_kv(t, 1, a, range(0, 10));  // [0-3] [4-7] [8,9]
  ASSERT_TRUE(t.leave(1).ok());           // retained
  EXPECT_EQ(t.continuation(range(0, 2), 3), (std::vector<int32_t>{2, 3, 4}));  // on into the child
  EXPECT_EQ(t.continuation(range(0, 5), 10), (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(t.continuation(range(0, 4), 2), (std::vector<int32_t>{4, 5}));  // from a chunk's start
  EXPECT_TRUE(t.continuation(range(0, 10), 4).empty());                   // nothing after
  EXPECT_TRUE(t.continuation(std::vector<int32_t>{0, 1, 9}, 4).empty());  // another text
  EXPECT_TRUE(t.continuation(range(0, 2), 0).empty());
  EXPECT_EQ(t.continuation({}, 2), (std::vector<int32_t>{0, 1}));
}

TEST(HostTree, TruncateInsideASharedChunkCopiesIt) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 16);
  std::vector<int32_t> a;
  int m;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  append_with_kv(t, 1, a, range(0, 7));  // [0-3] [4-6]
  ASSERT_TRUE(t.fork(1, 2).ok());
  const std::vector<int32_t> b = a;
  const ChunkId tail = t.chunks_of(1)[1];
  ASSERT_TRUE(t.truncate(1, 5).ok());
  a.resize(5);
  EXPECT_NE(t.chunks_of(1)[1], tail);  // its own copy of [4]
  EXPECT_EQ(t.chunks_of(2)[1], tail);  // the other reader's chunk is untouched
  expect_reads_back(t, 1, a);
  expect_reads_back(t, 2, b);
  append_with_kv(t, 1, a, std::vector<int32_t>{77, 78});
  expect_reads_back(t, 1, a);
  expect_reads_back(t, 2, b);
}

// ChunkAttention §3.1: b sequences sharing n_s tokens with private suffixes
// use n_s/c shared chunks plus their private ones, and save (b-1)/b of the
// shared fraction r = n_s/n_p of the memory (-> r for large b).
TEST(HostTree, PaperMemoryFigures) {
  const int c = 64;
  for (auto [b, n_s, n_p] : {std::tuple{32, 1024, 2048}, {8, 4096, 4096}, {16, 512, 2048}}) {
    const KvLayout L{1, 1, 4, c, KvType::kF16};
    HostTree t(L, L.chunk_bytes() * size_t(b * n_p / c + 8));
    const auto shared = range(0, n_s);
    for (int s = 0; s < b; ++s) {
      int m;
      ASSERT_TRUE(t.join(s, shared, &m).ok());
      EXPECT_EQ(m, s == 0 ? 0 : n_s);
      if (s == 0) {
        ASSERT_TRUE(t.append(s, shared).ok());
      }
      ASSERT_TRUE(t.append(s, range(1000000 * (s + 1), n_p - n_s)).ok());
    }
    const int expected = n_s / c + b * ((n_p - n_s + c - 1) / c);
    EXPECT_EQ(t.stats().used, expected);
    const double without = double(b) * n_p / c;
    const double saved = 1.0 - expected / without;
    const double r = double(n_s) / n_p;
    EXPECT_NEAR(saved, r * (b - 1) / b, 1e-12);
    const auto ctx = t.context();
    EXPECT_EQ(int(ctx->shared.size()), n_s / c);
    for (const auto& sc : ctx->shared) EXPECT_EQ(int(sc.readers.size()), b);
  }
}

TEST(HostTree, ContextOrdersSequencesContiguously) {
  const KvLayout L = small_layout();
  HostTree t(L, L.chunk_bytes() * 64);
  int m;
  // Tree: A=[0..3][4..7][8], B=[0..3][4..7][9], C=[0..3][20], D=[30]
  for (auto [id, toks] : {std::pair<SeqId, std::vector<int32_t>>{10, {0, 1, 2, 3, 4, 5, 6, 7, 8}},
                          {11, {0, 1, 2, 3, 20}},
                          {12, {30}},
                          {13, {0, 1, 2, 3, 4, 5, 6, 7, 9}}}) {
    ASSERT_TRUE(t.join(id, toks, &m).ok());
    ASSERT_TRUE(t.append(id, std::span(toks).subspan(size_t(m))).ok());
  }
  const auto ctx = t.context();
  ASSERT_EQ(ctx->seqs.size(), 4u);
  const int a = ctx->index_of(10), b = ctx->index_of(13), c = ctx->index_of(11);
  EXPECT_EQ(std::abs(a - b), 1);  // A and B share two chunks: adjacent
  ASSERT_EQ(ctx->shared.size(), 2u);
  EXPECT_EQ(ctx->shared[0].chunk, t.chunks_of(10)[0]);
  EXPECT_EQ(ctx->shared[0].readers.size(), 3u);  // A, B, C
  EXPECT_EQ(ctx->shared[1].readers.size(), 2u);  // A, B
  EXPECT_EQ(ctx->shared[1].depth, (std::vector<int>{1, 1}));
  // A prefix's readers are a contiguous range of the context order.
  for (const auto& sc : ctx->shared) EXPECT_EQ(sc.readers.back() - sc.readers.front() + 1, int(sc.readers.size()));
  EXPECT_EQ(ctx->private_from[size_t(a)], 2);
  EXPECT_EQ(ctx->private_from[size_t(c)], 1);
  EXPECT_EQ(ctx->private_from[size_t(ctx->index_of(12))], 0);
  // Unchanged structure: the same snapshot; a filled chunk: a new one.
  EXPECT_EQ(t.context(), ctx);
  ASSERT_TRUE(t.append(12, std::vector<int32_t>{31, 32}).ok());
  EXPECT_EQ(t.context(), ctx);
  ASSERT_TRUE(t.append(12, std::vector<int32_t>{33, 34}).ok());
  EXPECT_NE(t.context(), ctx);
}

// Checks the context against the sequences' chunk lists: chunks before
// private_from are read by several sequences, the rest by one; each shared
// chunk's range is exactly the sequences holding it at that depth.
void check_context(HostTree& t, const std::map<SeqId, std::vector<int32_t>>& ref) {
  const auto ctx = t.context();
  ASSERT_EQ(ctx->seqs.size(), ref.size());
  std::map<ChunkId, int> readers;
  for (const auto& [id, toks] : ref)
    for (ChunkId c : t.chunks_of(id)) ++readers[c];
  size_t n_shared = 0;
  for (auto [c, n] : readers) n_shared += n > 1;
  ASSERT_EQ(ctx->shared.size(), n_shared);
  for (size_t i = 0; i < ctx->seqs.size(); ++i) {
    const auto& chunks = t.chunks_of(ctx->seqs[i]);
    ASSERT_EQ(std::vector<ChunkId>(ctx->chunks.begin() + ctx->chunk_begin[i],
                                   ctx->chunks.begin() + ctx->chunk_begin[i + 1]),
              chunks);
    for (size_t j = 0; j < chunks.size(); ++j)
      ASSERT_EQ(readers[chunks[j]] > 1, int(j) < ctx->private_from[i]);
  }
  for (const auto& sc : ctx->shared) {
    ASSERT_GE(sc.readers.size(), 2u);
    ASSERT_EQ(sc.readers.back() - sc.readers.front() + 1, int(sc.readers.size()));  // contiguous
    for (int i = 0; i < int(ctx->seqs.size()); ++i) {
      const auto& chunks = t.chunks_of(ctx->seqs[size_t(i)]);
      const auto at = std::find(sc.readers.begin(), sc.readers.end(), i);
      const bool reads = at != sc.readers.end();
      const int depth = sc.depth.front();
      ASSERT_EQ(int(chunks.size()) > depth && chunks[size_t(depth)] == sc.chunk, reads)
          << "chunk " << sc.chunk << " seq index " << i;
      if (reads) {
        ASSERT_EQ(sc.depth[size_t(at - sc.readers.begin())], depth);
      }
    }
  }
}

// Pinned chunks (Prompt Cache modules): written once, read by detached
// sequences wherever in their chunk lists, shared not copied; a detached
// sequence's own chunks, partially filled anywhere, read back at their place.
TEST(HostTree, PinnedChunksAreSharedAnywhere) {
  const KvLayout L = small_layout();  // c = 4
  HostTree t(L, L.chunk_bytes() * 32);
  // Module M1 (4 tokens, full) and M2 (2 tokens, partial), K/V as if computed
  // after the prefix {100, 101}: any fixed values will do.
  uint64_t group = 0;
  auto pin = [&](std::vector<int32_t> toks) {
    const ChunkId c = t.pin(toks, ++group);
    EXPECT_GE(c, 0);
    std::vector<float> k(size_t(L.head_dim)), v(k.size());
    std::vector<int32_t> prefix = {100, 101};
    for (size_t i = 0; i < toks.size(); ++i) {
      prefix.push_back(toks[i]);
      for (int l = 0; l < L.n_layers; ++l)
        for (int h = 0; h < L.n_kv_heads; ++h) {
          kv_of(prefix, l, h, L.head_dim, k.data(), v.data());
          t.memory().write_kv(c, int(i), l, h, k.data(), v.data());
        }
    }
    return c;
  };
  const ChunkId m1 = pin({1, 2, 3, 4}), m2 = pin({5, 6});
  EXPECT_TRUE(t.pinned(m1));
  EXPECT_EQ(t.stats().pinned, 2);
  EXPECT_EQ(t.stats().used, 0);
  int m;
  // A: [M1] own(3) [M2] own(5); B: own(1) [M2] own(2).
  ASSERT_TRUE(t.join_detached(1).ok());
  ASSERT_TRUE(t.attach_pinned(1, std::vector<ChunkId>{m1}).ok());
  std::vector<int32_t> a = {1, 2, 3, 4};
  append_with_kv(t, 1, a, range(10, 3));
  ASSERT_TRUE(t.attach_pinned(1, std::vector<ChunkId>{m2}).ok());
  a.push_back(5), a.push_back(6);
  EXPECT_EQ(t.chunks_to_append(1, 1), 1);  // never into a pinned chunk
  std::vector<int32_t> a_tail = a;
  append_with_kv(t, 1, a_tail, range(20, 5));
  ASSERT_TRUE(t.join_detached(2).ok());
  std::vector<int32_t> b;
  append_with_kv(t, 2, b, range(30, 1));
  ASSERT_TRUE(t.attach_pinned(2, std::vector<ChunkId>{m2}).ok());
  b.push_back(5), b.push_back(6);
  append_with_kv(t, 2, b, range(40, 2));
  EXPECT_EQ(t.length(1), 4 + 3 + 2 + 5);
  EXPECT_EQ(t.chunks_of(1), (std::vector<ChunkId>{m1, t.chunks_of(1)[1], m2, t.chunks_of(1)[3], t.chunks_of(1)[4]}));
  // slot() finds tokens across partially filled chunks in the middle.
  EXPECT_EQ(t.slot(1, 6), std::make_pair(t.chunks_of(1)[1], 2));
  EXPECT_EQ(t.slot(1, 7), std::make_pair(m2, 0));
  EXPECT_EQ(t.slot(1, 9), std::make_pair(t.chunks_of(1)[3], 0));
  EXPECT_EQ(t.slot(2, 3), std::make_pair(t.chunks_of(2)[2], 0));
  // Own tokens read back as written (the pinned ones by their fixed values).
  std::vector<float> k(size_t(L.head_dim)), v(k.size()), ek(k.size()), ev(k.size());
  t.read_kv(1, 12, 1, 1, k.data(), v.data());
  kv_of(std::vector<int32_t>(a_tail.begin(), a_tail.begin() + 13), 1, 1, L.head_dim, ek.data(), ev.data());
  EXPECT_EQ(k, ek);
  t.read_kv(2, 1, 0, 1, k.data(), v.data());
  kv_of({100, 101, 5}, 0, 1, L.head_dim, ek.data(), ev.data());
  EXPECT_EQ(k, ek);
  // A tree sequence beside them; the context lists it first, then A and B,
  // and M2 as shared by A (depth 2) and B (depth 1).
  ASSERT_TRUE(t.join(3, {}, &m).ok());
  std::vector<int32_t> c3;
  append_with_kv(t, 3, c3, range(50, 5));
  const auto ctx = t.context();
  EXPECT_EQ(ctx->seqs, (std::vector<SeqId>{3, 1, 2}));
  ASSERT_EQ(ctx->shared.size(), 1u);
  EXPECT_EQ(ctx->shared[0].chunk, m2);
  EXPECT_EQ(ctx->shared[0].readers, (std::vector<int>{1, 2}));
  EXPECT_EQ(ctx->shared[0].depth, (std::vector<int>{2, 1}));
  // Pinned chunks are never evicted, and cannot be unpinned while read.
  EXPECT_EQ(t.evict(100), 0);
  EXPECT_EQ(t.unpin(m2).code, KvCode::kInUse);
  EXPECT_EQ(t.unpin(t.chunks_of(1)[1]).code, KvCode::kInvalid);
  EXPECT_EQ(t.attach_pinned(3, std::vector<ChunkId>{m1}).code, KvCode::kInvalid);  // not detached
  // A fork copies a shared partial own tail on write; leaving frees own chunks.
  ASSERT_TRUE(t.fork(2, 4).ok());
  std::vector<int32_t> b4 = b;
  append_with_kv(t, 4, b4, range(60, 1));
  EXPECT_NE(t.chunks_of(4).back(), t.chunks_of(2).back());
  for (int i : {0, 3, 4, 5}) {  // its own tokens (kv_of of its tokens so far); 1 and 2 are M2's
    t.read_kv(4, i, 1, 0, k.data(), v.data());
    kv_of(std::vector<int32_t>(b4.begin(), b4.begin() + i + 1), 1, 0, L.head_dim, ek.data(), ev.data());
    EXPECT_EQ(v, ev) << "token " << i;
  }
  const int free_before = t.stats().free;
  ASSERT_TRUE(t.leave(1).ok());
  EXPECT_EQ(t.stats().free, free_before + 3);  // A's three own chunks; no retention outside the tree
  ASSERT_TRUE(t.leave(2).ok());
  ASSERT_TRUE(t.leave(4).ok());
  EXPECT_TRUE(t.unpin(m2).ok());
  EXPECT_TRUE(t.unpin(m1).ok());
  EXPECT_EQ(t.stats().pinned, 0);
  EXPECT_EQ(t.stats().used, 2);  // sequence 3's
}

// The console's picture: runs of chunks with one child collapse into one
// node; readers, uses and states follow joins, leaves and pins; the cap
// keeps the first nodes breadth first and counts the rest.
TEST(HostTree, ViewCollapsesRunsAndCountsUses) {
  const KvLayout L = small_layout();  // c = 4
  HostTree t(L, L.chunk_bytes() * 32);
  const std::vector<int32_t> sys = {1, 2, 3, 4, 5, 6, 7, 8};  // two full chunks
  int m = 0;
  auto with = [&](std::vector<int32_t> own) {
    std::vector<int32_t> p = sys;
    p.insert(p.end(), own.begin(), own.end());
    return p;
  };
  const auto a = with({20, 21}), b = with({30});
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  ASSERT_TRUE(t.append(1, a).ok());
  ASSERT_TRUE(t.join(2, std::span(b).first(b.size() - 1), &m).ok());
  EXPECT_EQ(m, 8);
  ASSERT_TRUE(t.append(2, std::span(b).last(1)).ok());
  TreeView v = t.view(100, 3);
  ASSERT_EQ(v.nodes.size(), 3u);
  EXPECT_EQ(v.nodes[0].parent, -1);
  EXPECT_EQ(v.nodes[0].chunks, 2);  // the system prompt's two chunks, one run
  EXPECT_EQ(v.nodes[0].tokens, 8);
  EXPECT_EQ(v.nodes[0].readers, 2);
  EXPECT_EQ(v.nodes[0].uses, 2);
  EXPECT_EQ(v.nodes[0].state, TreeViewNode::State::kLive);
  EXPECT_EQ(v.nodes[0].head, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(v.nodes[1].parent, 0);
  EXPECT_EQ(v.nodes[1].tokens, 2);
  EXPECT_EQ(v.nodes[1].readers, 1);
  EXPECT_EQ(v.nodes[2].head, (std::vector<int32_t>{30}));
  EXPECT_EQ(v.live_sequences, 2);
  EXPECT_EQ(v.unshared_chunks, 6);  // 3 chunks each without sharing
  EXPECT_EQ(v.held_chunks, 4);
  ASSERT_TRUE(t.leave(1).ok());
  ASSERT_TRUE(t.leave(2).ok());
  const ChunkId p1 = t.pin(std::vector<int32_t>{40, 41, 42, 43}, 9), p2 = t.pin(std::vector<int32_t>{44}, 9);
  ASSERT_GE(p1, 0);
  ASSERT_GE(p2, 0);
  v = t.view(100, 8);
  ASSERT_EQ(v.nodes.size(), 4u);  // the partial tails stay cached; the module is one node
  EXPECT_EQ(v.nodes[0].state, TreeViewNode::State::kCached);
  EXPECT_EQ(v.nodes[0].readers, 0);
  EXPECT_EQ(v.nodes[0].uses, 2);
  EXPECT_EQ(v.nodes[1].state, TreeViewNode::State::kCached);
  EXPECT_EQ(v.nodes[3].state, TreeViewNode::State::kPinned);
  EXPECT_EQ(v.nodes[3].parent, -1);
  EXPECT_EQ(v.nodes[3].head, (std::vector<int32_t>{40, 41, 42, 43, 44}));
  EXPECT_EQ(v.live_sequences, 0);
  const TreeView capped = t.view(1, 0);
  ASSERT_EQ(capped.nodes.size(), 1u);
  EXPECT_TRUE(capped.nodes[0].head.empty());
  EXPECT_EQ(capped.omitted_chunks, 4);  // the two tails and the module's two chunks
}

#if !defined(NDEBUG) || defined(CHUNKSERVE_DEBUG_CHECKS)
TEST(PrefixTreeDeathTest, SecondWriterThreadAborts) {
  EXPECT_DEATH(
      {
        HostTree t(small_layout(), small_layout().chunk_bytes() * 4);
        int m;
        (void)t.join(1, {}, &m);
        std::thread other([&] { (void)t.join(2, {}, &m); });
        other.join();
      },
      "single-writer");
}
#endif

// Thousands of random join/append/leave/fork/evict operations against a
// trivial reference (sequence -> tokens; K/V a function of the prefix).
TEST(HostTree, RandomOperationsMatchReference) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kBF16}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " type " + kv_type_name(type));
      std::mt19937 rng(seed);
      const KvLayout L = small_layout(type, 4);
      const int capacity = 48;
      HostTree t(L, L.chunk_bytes() * capacity, seed % 3 != 0);
      std::map<SeqId, std::vector<int32_t>> ref;
      SeqId next_id = 0;
      // A few prompt families so prefixes really are shared.
      std::vector<std::vector<int32_t>> families;
      for (int f = 0; f < 4; ++f) families.push_back(range(100 * f, 5 + int(rng() % 20)));
      auto rand_seq = [&]() {
        auto it = ref.begin();
        std::advance(it, long(rng() % ref.size()));
        return it->first;
      };
      for (int step = 0; step < 600; ++step) {
        const int op = int(rng() % 10);
        if (op < 3 || ref.empty()) {  // join with a family prefix + variation
          std::vector<int32_t> prompt = families[rng() % families.size()];
          prompt.resize(std::min(prompt.size(), size_t(1 + rng() % (prompt.size() + 1))));
          for (int k = int(rng() % 3); k > 0; --k) prompt.push_back(int32_t(rng() % 5));
          const SeqId id = next_id++;
          int m = -1;
          const KvStatus st = t.join(id, prompt, &m);
          if (!st.ok()) {
            ASSERT_EQ(st.code, KvCode::kPoolExhausted);
            continue;
          }
          ASSERT_LE(m, int(prompt.size()));
          ASSERT_GE(m, 0);
          auto& toks = ref[id];
          toks.assign(prompt.begin(), prompt.begin() + m);
          try_append_with_kv(t, id, toks, std::span(prompt).subspan(size_t(m)));
        } else if (op < 6) {  // append 1..5 tokens
          const SeqId id = rand_seq();
          std::vector<int32_t> add;
          for (int k = 1 + int(rng() % 5); k > 0; --k) add.push_back(int32_t(rng() % 7));
          const KvStats before = t.stats();
          if (!try_append_with_kv(t, id, ref[id], add)) {
            ASSERT_EQ(t.length(id), int(ref[id].size()));
            ASSERT_EQ(t.stats().free, before.free);
          }
        } else if (op < 8) {
          const SeqId id = rand_seq();
          ASSERT_TRUE(t.leave(id).ok());
          ref.erase(id);
          ASSERT_EQ(t.append(id, range(0, 1)).code, KvCode::kSequenceLeft);
        } else if (op < 9) {
          const SeqId id = rand_seq(), child = next_id++;
          ASSERT_TRUE(t.fork(id, child).ok());
          ref[child] = ref[id];
        } else {
          t.evict(int(rng() % 4));
        }
        // Invariants after every step.
        const KvStats s = t.stats();
        ASSERT_EQ(s.used + s.cached + s.free, capacity);
        std::set<ChunkId> live;
        for (const auto& [id, toks] : ref) live.insert(t.chunks_of(id).begin(), t.chunks_of(id).end());
        ASSERT_EQ(s.used, int(live.size()));
        for (const auto& [id, toks] : ref) expect_reads_back(t, id, toks);
        if (step % 10 == 0) check_context(t, ref);
      }
      for (const auto& [id, toks] : ref) ASSERT_TRUE(t.leave(id).ok());
      t.evict(capacity);
      EXPECT_EQ(t.stats().free, capacity);  // nothing leaked
    }
  }
}

}  // namespace
}  // namespace cs
