// The block events a prefix tree publishes (kv/block_ledger.h) describe
// exactly the blocks it holds: checked against the tree's own chunks after
// every step of random workloads, with the events replayed the way a
// subscriber (a router) would.
#include "kv/block_ledger.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "base/error.h"
#include "kv/host_tree.h"

namespace cs {
namespace {

KvLayout layout(int chunk) { return KvLayout{1, 1, 4, chunk, KvType::kF32}; }

std::vector<int32_t> range(int from, int n) {
  std::vector<int32_t> v(size_t(n), 0);
  for (int i = 0; i < n; ++i) v[size_t(i)] = from + i;
  return v;
}

// What a subscriber holds: the blocks the events stored and did not remove,
// each with its parent and tokens. Every event must make sense where it
// arrives (a stored block is new and its parent is held; a removed one was
// held and is nobody's parent).
struct Subscriber {
  struct Block {
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
  };
  std::map<uint64_t, Block> held;

  void apply(const std::vector<BlockEvent>& events) {
    for (const BlockEvent& e : events) {
      if (e.kind == BlockEvent::Kind::kStored) {
        ASSERT_FALSE(held.count(e.hash)) << "stored twice: " << e.hash;
        if (e.parent) {
          ASSERT_TRUE(held.count(*e.parent)) << "parent not held: " << *e.parent;
        }
        held[e.hash] = {e.parent, e.tokens};
      } else {
        ASSERT_TRUE(held.count(e.hash)) << "removed but not held: " << e.hash;
        for (const auto& [h, b] : held) ASSERT_NE(b.parent, std::optional(e.hash)) << "removed a parent first";
        held.erase(e.hash);
      }
    }
  }
};

// The blocks the tree holds, computed from its chunks now: every full block
// of every chunk, hashed along the path from the root.
std::map<uint64_t, Subscriber::Block> blocks_of(const HostTree& t, int block) {
  std::map<uint64_t, Subscriber::Block> out;
  std::map<ChunkId, std::optional<uint64_t>> last;  // a chunk's last block hash
  for (const auto& c : t.tree_chunks()) {
    std::optional<uint64_t> prev = c.parent == kNoChunk ? std::nullopt : last.at(c.parent);
    for (size_t b = 0; b + size_t(block) <= c.tokens.size(); b += size_t(block)) {
      const auto toks = c.tokens.subspan(b, size_t(block));
      const uint64_t h = block_hash(prev, toks);
      out[h] = {prev, std::vector<int32_t>(toks.begin(), toks.end())};
      prev = h;
    }
    last[c.id] = prev;
  }
  return out;
}

void expect_same(const std::map<uint64_t, Subscriber::Block>& a, const std::map<uint64_t, Subscriber::Block>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [h, blk] : a) {
    auto it = b.find(h);
    ASSERT_NE(it, b.end()) << "block " << h << " missing";
    EXPECT_EQ(it->second.parent, blk.parent);
    EXPECT_EQ(it->second.tokens, blk.tokens);
  }
}

TEST(BlockLedger, HashesChainFromTheParentAndFitInt64) {
  const auto a = range(1, 4), b = range(5, 4);
  const uint64_t ha = block_hash(std::nullopt, a), hb = block_hash(ha, b);
  EXPECT_EQ(ha, block_hash(std::nullopt, a));  // deterministic: every replica agrees
  EXPECT_NE(hb, block_hash(std::nullopt, b));  // the same tokens after another prefix differ
  EXPECT_NE(ha, block_hash(0, a));             // "no parent" is not parent 0
  EXPECT_LT(ha, uint64_t(1) << 63);
  EXPECT_LT(hb, uint64_t(1) << 63);
}

TEST(BlockLedger, BlockSizeMustDivideTheChunk) {
  EXPECT_THROW(BlockLedger(3, 64), Error);
  EXPECT_THROW(BlockLedger(0, 64), Error);
  EXPECT_NO_THROW(BlockLedger(16, 64));
}

TEST(BlockLedger, StoresFullBlocksOnceAndRemovesThemDeepestFirst) {
  HostTree t(layout(4), layout(4).chunk_bytes() * 8);
  BlockLedger ledger(2, 4);
  t.observe(&ledger);
  int m = 0;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  ASSERT_TRUE(t.append(1, range(10, 7)).ok());  // blocks [10 11] [12 13] | [14 15], 16 pending
  auto ev = ledger.take();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].tokens, range(10, 2));
  EXPECT_FALSE(ev[0].parent);
  EXPECT_EQ(ev[1].parent, std::optional(ev[0].hash));
  EXPECT_EQ(ev[2].tokens, range(14, 2));
  EXPECT_EQ(ev[2].parent, std::optional(ev[1].hash));  // across the chunk boundary
  ASSERT_TRUE(t.append(1, range(17, 1)).ok());      // completes [16 17]
  ev = ledger.take();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].tokens, range(16, 2));

  // A second sequence with the same prompt shares the chunks: no new block.
  ASSERT_TRUE(t.join(2, range(10, 6), &m).ok());
  EXPECT_EQ(m, 6);  // one full chunk shared, two tokens copied into its own
  EXPECT_TRUE(ledger.take().empty());  // the copy holds [14 15] too: counted, not announced
  EXPECT_EQ(ledger.blocks(), 4u);

  ASSERT_TRUE(t.leave(1).ok());
  ASSERT_TRUE(t.leave(2).ok());
  EXPECT_TRUE(ledger.take().empty());  // retained: still held
  t.evict(8);
  ev = ledger.take();
  ASSERT_EQ(ev.size(), 4u);
  for (const auto& e : ev) EXPECT_EQ(e.kind, BlockEvent::Kind::kRemoved);
  EXPECT_EQ(ev.back().hash, block_hash(std::nullopt, range(10, 2)));  // the root's block goes last
  EXPECT_EQ(ledger.blocks(), 0u);
}

// Work in progress: a prompt reserved as its prefill is admitted is held (and
// announced) before the tree computes it; the tree's chunks then hold the
// same blocks (no second announcement); releasing the reservation leaves
// them held by the chunks. A reservation never computed (a cancelled
// prefill) is removed when released. A subscriber's view stays consistent.
TEST(BlockLedger, AReservedPromptIsAnnouncedBeforeItIsComputed) {
  HostTree t(layout(4), layout(4).chunk_bytes() * 8);
  BlockLedger ledger(2, 4);
  t.observe(&ledger);
  Subscriber sub;
  ledger.reserve(1, range(10, 9));  // four full blocks, the ninth token pending
  auto ev = ledger.take();
  sub.apply(ev);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[3].tokens, range(16, 2));
  int m = 0;
  ASSERT_TRUE(t.join(1, {}, &m).ok());
  ASSERT_TRUE(t.append(1, range(10, 9)).ok());
  EXPECT_TRUE(ledger.take().empty());  // already announced
  ledger.release(1);
  EXPECT_TRUE(ledger.take().empty());  // the chunks hold them
  expect_same(sub.held, blocks_of(t, 2));
  // Another prompt, reserved and then abandoned before any of it is computed.
  ledger.reserve(2, range(10, 4));      // shares [10 11] [12 13] with the tree
  ledger.reserve(3, range(50, 4));
  ev = ledger.take();
  sub.apply(ev);
  ASSERT_EQ(ev.size(), 2u);
  ledger.release(3);
  ledger.release(2);
  ledger.release(2);  // twice: nothing more
  ev = ledger.take();
  sub.apply(ev);
  ASSERT_EQ(ev.size(), 2u);
  for (const auto& e : ev) EXPECT_EQ(e.kind, BlockEvent::Kind::kRemoved);
  expect_same(sub.held, blocks_of(t, 2));
}

TEST(BlockLedger, PinnedAndDetachedChunksAreNotAnnounced) {
  HostTree t(layout(4), layout(4).chunk_bytes() * 8);
  BlockLedger ledger(4, 4);
  t.observe(&ledger);
  const ChunkId p = t.pin(range(1, 4), 7);
  ASSERT_GE(p, 0);
  ASSERT_TRUE(t.join_detached(1).ok());
  ASSERT_TRUE(t.attach_pinned(1, std::vector<ChunkId>{p}).ok());
  ASSERT_TRUE(t.append(1, range(20, 5)).ok());
  EXPECT_TRUE(ledger.take().empty());
  ASSERT_TRUE(t.leave(1).ok());
  ASSERT_TRUE(t.unpin(p).ok());
  EXPECT_TRUE(ledger.take().empty());
}

TEST(BlockLedger, RandomWorkloadsMatchTheTreeAfterEveryStep) {
  for (int block : {1, 2, 4}) {
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      SCOPED_TRACE("block " + std::to_string(block) + " seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      const KvLayout L = layout(4);
      HostTree t(L, L.chunk_bytes() * 40, seed % 4 != 0);
      BlockLedger ledger(block, 4);
      t.observe(&ledger);
      Subscriber sub;
      std::set<SeqId> live;
      SeqId next = 0;
      std::vector<std::vector<int32_t>> families;
      for (int f = 0; f < 4; ++f) families.push_back(range(100 * f, 3 + int(rng() % 18)));
      auto any = [&] {
        auto it = live.begin();
        std::advance(it, long(rng() % live.size()));
        return *it;
      };
      for (int step = 0; step < 500; ++step) {
        const int op = int(rng() % 10);
        if (op < 3 || live.empty()) {
          std::vector<int32_t> prompt = families[rng() % families.size()];
          prompt.resize(1 + rng() % prompt.size());
          for (int k = int(rng() % 3); k > 0; --k) prompt.push_back(int32_t(rng() % 5));
          int m = 0;
          const SeqId id = next++;
          if (!t.join(id, prompt, &m).ok()) continue;
          live.insert(id);
          (void)t.append(id, std::span(prompt).subspan(size_t(m)));  // may not fit: then nothing changes
        } else if (op < 6) {
          std::vector<int32_t> add;
          for (int k = 1 + int(rng() % 6); k > 0; --k) add.push_back(int32_t(rng() % 7));
          (void)t.append(any(), add);
        } else if (op < 8) {
          const SeqId id = any();
          ASSERT_TRUE(t.leave(id).ok());
          live.erase(id);
        } else if (op < 9) {
          const SeqId child = next++;
          ASSERT_TRUE(t.fork(any(), child).ok());
          live.insert(child);
        } else {
          t.evict(int(rng() % 5));
        }
        sub.apply(ledger.take());
        ASSERT_NO_FATAL_FAILURE(expect_same(blocks_of(t, block), sub.held));
        ASSERT_EQ(ledger.blocks(), sub.held.size());
      }
      for (SeqId id : live) ASSERT_TRUE(t.leave(id).ok());
      t.evict(1000);
      sub.apply(ledger.take());
      EXPECT_TRUE(sub.held.empty());
    }
  }
}

}  // namespace
}  // namespace cs
