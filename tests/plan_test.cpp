// The attention plan made from plain arrays (PlanInput), with no tree: what a
// device-side planner, or a test, hands it.
#include "attn/plan.h"

#include <gtest/gtest.h>

#include "omp_threads.h"

namespace cs {
namespace {

// Two sequences reading chunk 0 first, then one chunk of their own each.
PlanInput two_sequences(std::vector<uint64_t> groups) {
  auto ctx = std::make_shared<KernelContext>();
  ctx->seqs = {10, 11};
  ctx->chunks = {0, 1, 0, 2};
  ctx->chunk_begin = {0, 2, 4};
  ctx->private_from = {1, 1};
  ctx->shared = {{0, {0, 1}, {0, 0}}};
  return {KvLayout{1, 1, 64, 64, KvType::kF16}, ctx, {100, 70}, {64, 36, 64, 6}, std::move(groups)};
}

TEST(Plan, IsMadeFromPlainArrays) {
  const AttnPlan p = plan_attention(two_sequences({0, 0, 0, 0}), {}, 4);
  EXPECT_EQ(p.n_seqs(), 2);
  EXPECT_EQ(p.seq_len, (std::vector<int>{100, 70}));
  EXPECT_EQ(p.chunk_len, (std::vector<int>{64, 36, 64, 6}));
  EXPECT_EQ(p.chunk_start, (std::vector<int>{0, 64, 0, 64}));
  EXPECT_EQ(p.parts_of(0), 1);
  EXPECT_EQ(p.part(1, 0), std::make_pair(0, 2));
  // The shared chunk is two-phase partition's chunk-first work (2 sequences x
  // 4 query heads of the one KV head; split by readers when the threads
  // want more items) and relay's system run.
  std::vector<int> readers;
  for (int r = 0; r < p.tpp.n_runs(); ++r) {
    EXPECT_EQ(std::vector<ChunkId>(p.tpp.chunks(r).begin(), p.tpp.chunks(r).end()), (std::vector<ChunkId>{0}));
    for (size_t k = 0; k < p.tpp.readers(r).size(); ++k) {
      readers.push_back(p.tpp.readers(r)[k]);
      EXPECT_EQ(p.tpp.depths(r)[k], 0);
    }
  }
  EXPECT_EQ(readers, (std::vector<int>{0, 1}));
  ASSERT_FALSE(p.relay.empty());
  for (int r = 0; r < p.relay.n_runs(); ++r)
    EXPECT_EQ(std::vector<ChunkId>(p.relay.chunks(r).begin(), p.relay.chunks(r).end()), (std::vector<ChunkId>{0}));
  // Each reader finds the one piece of the shared chunk: depth 0 of its walk.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(p.tpp.pieces_of_seq(i).size(), 1u);
    EXPECT_EQ(p.tpp.pieces_of_seq(i)[0].d0, 0);
    EXPECT_EQ(p.tpp.pieces_of_seq(i)[0].d1, 1);
  }
}

TEST(Plan, HoldsNoPointerIntoItsInput) {
  // The plan is flat copies: the input's context may go once planned.
  PlanInput in = two_sequences({0, 0, 0, 0});
  std::weak_ptr<const KernelContext> ctx = in.ctx;
  const AttnPlan p = plan_attention(std::move(in), {}, 4);
  EXPECT_TRUE(ctx.expired());
  EXPECT_EQ(p.seqs, (std::vector<SeqId>{10, 11}));
  EXPECT_EQ(p.chunk, (std::vector<ChunkId>{0, 1, 0, 2}));
  EXPECT_EQ(p.chunk_begin, (std::vector<int>{0, 2, 4}));
}

TEST(Plan, APinnedGroupIsAPartOfItsOwn) {
  // Sequence 0's second chunk pinned (a module's, group 7): its walk is cut there.
  const AttnPlan p = plan_attention(two_sequences({0, 7, 0, 0}), {}, 4);
  ASSERT_EQ(p.parts_of(0), 2);
  EXPECT_EQ(p.part(0, 0), std::make_pair(0, 1));
  EXPECT_EQ(p.part(0, 1), std::make_pair(1, 2));
  EXPECT_EQ(p.parts_of(1), 1);
}

// Three sequences under one prefix (chunk 0); the last two share a deeper
// one (chunk 1) too, then a chunk of their own each: chunk 1's run is nested
// in chunk 0's, in the same part of the walk, so it goes on from chunk 0's
// states (a wave later) and chunk 0's piece is not merged again for them.
TEST(Plan, ANestedRunContinuesTheWiderOne) {
  auto ctx = std::make_shared<KernelContext>();
  ctx->seqs = {10, 11, 12};
  ctx->chunks = {0, 3, 0, 1, 4, 0, 1, 5};
  ctx->chunk_begin = {0, 2, 5, 8};
  ctx->private_from = {1, 2, 2};
  ctx->shared = {{0, {0, 1, 2}, {0, 0, 0}}, {1, {1, 2}, {1, 1}}};
  PlanInput in{KvLayout{1, 4, 64, 64, KvType::kF16}, ctx, {70, 134, 131},
               {64, 6, 64, 64, 6, 64, 64, 3}, std::vector<uint64_t>(8, 0)};
  // Two threads: the four KV heads give them enough items, so no run is
  // split by its readers.
  SavedOmpThreads saved;
  omp_set_num_threads(2);
  const AttnPlan p = plan_attention(std::move(in), {}, 4);
  const ChunkFirstWork& w = p.tpp;
  ASSERT_EQ(w.n_runs(), 2);
  ASSERT_EQ(w.n_waves(), 2);
  EXPECT_EQ(std::vector<int>(w.wave(0).begin(), w.wave(0).end()), std::vector<int>{0});
  EXPECT_EQ(std::vector<int>(w.wave(1).begin(), w.wave(1).end()), std::vector<int>{1});
  EXPECT_TRUE(w.chained_of(0).empty());
  ASSERT_EQ(w.chained_of(1).size(), 2u);  // sequences 1 and 2 go on from run 0
  EXPECT_EQ(w.chained_of(1)[0].first, 1);
  EXPECT_EQ(w.chained_of(1)[1].first, 2);
  ASSERT_EQ(w.pieces_of_seq(0).size(), 1u);
  EXPECT_FALSE(w.pieces_of_seq(0)[0].continued);  // sequence 0 reads only the wide run
  for (int i : {1, 2}) {
    const auto mine = w.pieces_of_seq(i);
    ASSERT_EQ(mine.size(), 2u);
    EXPECT_TRUE(mine[0].continued);
    EXPECT_EQ(mine[0].parent, -1);
    EXPECT_EQ(mine[1].parent, mine[0].piece);
    EXPECT_EQ(mine[1].parent_row0, mine[0].row0);
    EXPECT_EQ(std::make_pair(mine[1].d0, mine[1].d1), std::make_pair(1, 2));
    EXPECT_FALSE(mine[1].continued);
  }
}

}  // namespace
}  // namespace cs
