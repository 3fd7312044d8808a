// The scheduler over a fake SequenceCache (counts only: no tree, no model),
// and PrefixKv alone (no model): each unit by itself, as the engine tests
// cannot show which one decided.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cache/prefix_kv.h"
#include "model/llama.h"
#include "tiny_model.h"

namespace cs {
namespace {

const Tokenizer& tokenizer() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  return m->tokenizer();
}

// Cached tokens per live sequence in chunks of `c`, a pool of `capacity`
// chunks; a join finds `shared` of the known tokens cached (0: none). Each
// call the scheduler makes is written down.
struct FakeCache : SequenceCache {
  FakeCache(int capacity, int c) : capacity(capacity), c(c) {}
  int capacity, c;
  int shared = 0;
  bool refuse_joins = false;
  std::map<SeqId, int> len;
  std::vector<std::string> calls;

  int chunks_of(int n) const { return (n + c - 1) / c; }
  int used() const {
    int u = 0;
    for (const auto& [id, n] : len) u += chunks_of(n);
    return u;
  }
  KvStatus join(SeqId id, std::span<const int32_t> tokens, int* matched) override {
    if (refuse_joins) {
      calls.push_back("refused " + std::to_string(id));
      return {KvCode::kPoolExhausted, "no room"};
    }
    *matched = std::min(shared, int(tokens.size()));
    len[id] = *matched;
    calls.push_back("join " + std::to_string(id) + " " + std::to_string(*matched));
    return KvStatus::Ok();
  }
  KvStatus join_detached(SeqId id) override {
    len[id] = 0;
    return KvStatus::Ok();
  }
  KvStatus attach(SeqId id, std::span<const ChunkId>, std::span<const int32_t> positions) override {
    len[id] += int(positions.size());
    return KvStatus::Ok();
  }
  KvStatus truncate(SeqId id, int n) override {
    calls.push_back("truncate " + std::to_string(id) + " " + std::to_string(n));
    len[id] = n;
    return KvStatus::Ok();
  }
  KvStatus leave(SeqId id) override {
    calls.push_back("leave " + std::to_string(id));
    len.erase(id);
    return KvStatus::Ok();
  }
  int chunks_to_append(SeqId id, int n) const override {
    const auto it = len.find(id);
    const int l = it == len.end() ? 0 : it->second;
    return chunks_of(l + n) - chunks_of(l);
  }
  int chunks_needed(const Batch& batch) const override {
    std::map<SeqId, int> n;
    for (int32_t s : batch.seq) ++n[s];
    int need = 0;
    for (const auto& [id, k] : n) need += chunks_to_append(id, k);
    return need;
  }
  int chunks_available() const override { return capacity - used(); }
  int chunk_size() const override { return c; }
  // The forward pass: the batch's tokens are cached.
  void run(const Batch& batch) {
    for (int32_t s : batch.seq) ++len[s];
  }
};

std::unique_ptr<Sequence> sequence(SeqId id, std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  return std::make_unique<Sequence>(id, std::make_shared<RequestState>(uint64_t(id), std::move(r)), 0, tokenizer());
}

std::vector<int32_t> tokens(int n, int32_t first = 10) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = first + i % 200;
  return t;
}

// One step: plan, the fake forward pass, commit. The rows as "id:take[*]"
// (* = wants logits); empty when nothing ran.
std::vector<std::string> step(Scheduler& s, FakeCache& kv) {
  Batch batch;
  std::vector<Scheduler::Row> rows;
  std::vector<Sequence*> stuck;
  if (!s.plan(batch, rows, stuck)) return {};
  kv.run(batch);
  s.committed(rows);
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(std::to_string(r.seq->id()) + ":" + std::to_string(r.take) + (r.logits ? "*" : ""));
  return out;
}

using Rows = std::vector<std::string>;

TEST(Scheduler, PrefillsInAdmissionOrderWithinTheStepBudget) {
  FakeCache kv(100, 16);
  Scheduler s(kv, {.max_batch = 4, .step_tokens = 64});
  s.enqueue(sequence(1, tokens(100)));
  s.enqueue(sequence(2, tokens(40, 500)));
  EXPECT_EQ(step(s, kv), (Rows{"1:64"}));
  // Both joined with every known token but the last (its logits sample).
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"join 1 0", "join 2 0"}));
  EXPECT_EQ(step(s, kv), (Rows{"1:36*", "2:28"}));
  EXPECT_EQ(step(s, kv), (Rows{"2:12*"}));
  EXPECT_EQ(step(s, kv), Rows{});  // nothing sampled here: nothing left to run
  EXPECT_EQ(kv.len.at(1), 100);
  EXPECT_EQ(kv.len.at(2), 40);
}

TEST(Scheduler, ASequenceWaitsForRoomAndIsAdmittedWhenItIsFreed) {
  // 8 chunks of 16: the first prompt's 100 tokens take 7 and one to grow into.
  FakeCache kv(8, 16);
  Scheduler s(kv, {.max_batch = 4, .step_tokens = 64});
  s.enqueue(sequence(1, tokens(100)));
  s.enqueue(sequence(2, tokens(40, 500)));
  EXPECT_EQ(step(s, kv), (Rows{"1:64"}));
  // Sequence 2 joined, found no room beside 1's reserve, and left at once.
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"join 1 0", "join 2 0", "leave 2"}));
  EXPECT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(step(s, kv), (Rows{"1:36*"}));
  EXPECT_EQ(s.running().size(), 1u);
  s.retire(s.running().front().get());
  kv.calls.clear();
  EXPECT_EQ(step(s, kv), (Rows{"2:40*"}));
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"join 2 0"}));
  EXPECT_EQ(s.preemptions(), 0u);
}

TEST(Scheduler, AJoinTheCacheRefusesLeavesTheSequenceWaiting) {
  FakeCache kv(100, 16);
  kv.refuse_joins = true;
  Scheduler s(kv, {.max_batch = 4, .step_tokens = 64});
  s.enqueue(sequence(1, tokens(20)));
  EXPECT_EQ(step(s, kv), Rows{});
  EXPECT_EQ(s.waiting().size(), 1u);
  EXPECT_TRUE(s.running().empty());
  kv.refuse_joins = false;
  EXPECT_EQ(step(s, kv), (Rows{"1:20*"}));
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"refused 1", "join 1 0"}));
}

TEST(Scheduler, APromptSharingChunksBeingPrefilledWaitsForThem) {
  FakeCache kv(100, 16);
  Scheduler s(kv, {.max_batch = 4, .step_tokens = 32});
  std::vector<int32_t> a = tokens(100), b = tokens(64);
  b.insert(b.end(), {900, 901, 902});
  s.enqueue(sequence(1, a));
  s.enqueue(sequence(2, b));
  EXPECT_EQ(step(s, kv), (Rows{"1:32"}));
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"join 1 0"}));  // 2 waits: its 4 shared chunks are not computed
  EXPECT_EQ(step(s, kv), (Rows{"1:32"}));
  // Sequence 1 holds the 64 shared tokens now: 2 joins and finds them cached.
  kv.shared = 64;
  EXPECT_EQ(step(s, kv), (Rows{"1:32"}));
  EXPECT_EQ(kv.calls, (std::vector<std::string>{"join 1 0", "join 2 64"}));
  EXPECT_EQ(step(s, kv), (Rows{"1:4*", "2:3*"}));
}

}  // namespace
}  // namespace cs
