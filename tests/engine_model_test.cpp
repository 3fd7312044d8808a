// The serving engine on the real default model: many chat requests sharing a
// system prompt, served at once, give every request the greedy tokens it gets
// alone, whatever the attention mode, the batch or preemption.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/chat_template.h"

namespace cs {
namespace {

using test::expect_same_tokens;
using test::run_all;
using test::run_each;

const LlamaModel& model() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(CS_MODEL);
  return *m;
}

// 32 chat requests: one system prompt (two full chunks and a bit), 8
// questions asked 4 times each; greedy, 20 tokens.
std::vector<Request> chat_requests(int n = 32, int max_tokens = 20) {
  const Tokenizer& tok = model().tokenizer();
  const ChatTemplate& t = model().chat();
  const std::string system =
      "You are a careful assistant for a bookstore. Answer in one short sentence. The store opens at nine, "
      "closes at six, sells new and used books, orders any title within three days, and offers a ten percent "
      "discount to students and teachers. Gift cards never expire. Returns are accepted within thirty days with "
      "a receipt. The cafe on the first floor serves coffee, tea and cakes until five. Readings by local authors "
      "take place every second Thursday at seven in the evening, and the children's corner has story time on "
      "Saturday mornings.";
  const char* questions[] = {"When do you open?", "Can teachers get a discount?", "Do gift cards expire?",
                             "How long do orders take?", "Is there coffee?", "When are the readings?",
                             "Can I return a book?", "What is on Saturday mornings?"};
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt = t.apply(std::vector<ChatMessage>{{"system", system}, {"user", questions[i % 8]}}).encode(tok, false);
    r.max_tokens = max_tokens;
    r.logprobs = 2;
    out.push_back(r);
  }
  return out;
}

EngineOptions opts(AttnMode mode, int max_batch = 32) {
  return test::engine_options(mode, max_batch, 0, size_t(256) << 20);
}

TEST(EngineModel, GreedyTokensAreIdenticalAcrossModesBatchesAndPreemption) {
  const auto reqs = chat_requests();
  Engine alone(model(), opts(AttnMode::kNone, 1));
  const std::vector<Request> first8(reqs.begin(), reqs.begin() + 8);
  auto ref8 = run_each(alone, first8);
  std::vector<Result> ref;
  for (int i = 0; i < 32; ++i) ref.push_back(ref8[size_t(i % 8)]);
  test::expect_modes_agree(model(), reqs, ref, {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kNone}, opts,
                           "engine");
  // A pool too small for the batch: sequences are preempted and recomputed.
  EngineOptions tight = opts(AttnMode::kTpp);
  Engine probe(model(), tight);
  tight.kv_memory = 24 * probe.stats().kv.chunk_bytes;
  auto longer = chat_requests(16, 120);
  for (auto& r : longer) r.ignore_eos = true;  // long enough to outgrow the pool
  Engine t(model(), tight);
  const auto got = run_all(t, longer);
  ASSERT_TRUE(t.wait_idle(std::chrono::seconds(60)));
  EXPECT_GT(t.stats().preemptions, 0u);
  Engine one(model(), opts(AttnMode::kTpp, 1));
  expect_same_tokens(got, run_each(one, longer), "preempted");
}

// Relay's log-sum-exp fusion rounds differently, and its system part (the
// chunks every running sequence shares) changes as sequences join and leave:
// greedy tokens may part from two-phase partition's, but only where the
// top-2 gap is within the model's noise floor. Its outlier channels turn
// float-rounding differences into logit differences of up to ~0.55 (our own
// scalar and SIMD kernels, both exact to rounding: Model.IsaLevelsAgree).
constexpr float kNoiseFloor = 0.6f;
TEST(EngineModel, RelayAgreesUpToNearTies) {
  const auto reqs = chat_requests(16);
  Engine tpp(model(), opts(AttnMode::kTpp)), relay(model(), opts(AttnMode::kRelay));
  const auto a = run_all(tpp, reqs), b = run_all(relay, reqs);
  int identical = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto &x = a[i].completions[0], &y = b[i].completions[0];
    size_t k = 0;
    while (k < x.tokens.size() && k < y.tokens.size() && x.tokens[k] == y.tokens[k]) ++k;
    if (k == x.tokens.size() && k == y.tokens.size()) {
      ++identical;
      continue;
    }
    ASSERT_LT(k, x.logprobs.size());
    const float gap = x.logprobs[k].top[0].logprob - x.logprobs[k].top[1].logprob;
    std::printf("[engine] relay vs tpp: request %zu parts at token %zu, top-2 gap %.5f\n", i, k, gap);
    EXPECT_LT(gap, kNoiseFloor) << "request " << i;
  }
  std::printf("[engine] relay vs tpp: %d of %zu completions identical\n", identical, a.size());
}

// Speculative decoding on the real model: requests that quote their prompt
// (so drafts from it are taken) give the same greedy tokens with drafts and
// without, alone and three at a time (drafts run in steps of up to 4
// decoding sequences), in each attention mode; one request also carries the
// passage as its prediction.
TEST(EngineModel, SpeculationChangesNoToken) {
  const Tokenizer& tok = model().tokenizer();
  const ChatTemplate& t = model().chat();
  const std::string passage =
      "The library lends books for three weeks. A book may be renewed twice unless another reader has reserved "
      "it. Late books cost ten cents a day, and a lost book costs its price plus a fee of five dollars.";
  const char* asks[] = {"Repeat the text above word for word.", "Copy the second sentence of the text above.",
                        "Quote the text above, then say thank you."};
  std::vector<Request> reqs;
  for (const char* ask : asks) {
    Request r;
    r.prompt = t.apply(std::vector<ChatMessage>{{"user", passage + "\n\n" + ask}}).encode(tok, false);
    r.max_tokens = 48;
    reqs.push_back(r);
  }
  reqs[2].prediction = tok.encode(passage, false);
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kNone}) {
    SCOPED_TRACE("mode " + std::to_string(int(mode)));
    EngineOptions off = opts(mode), on = opts(mode);
    off.speculate = false;
    on.speculate = true;
    Engine e_off(model(), off), e_on(model(), on);
    const auto ref = run_each(e_off, reqs);
    const auto alone = run_each(e_on, reqs);
    const auto batched = run_all(e_on, reqs);
    expect_same_tokens(ref, alone, "speculation alone");
    expect_same_tokens(ref, batched, "speculation batched");
    int accepted = 0;
    for (const auto& r : alone) accepted += r.usage.accepted_draft_tokens;
    EXPECT_GT(accepted, 20);
    EXPECT_EQ(ref[0].usage.drafted_tokens, 0);
    std::printf("[engine] speculation, mode %d: %d draft tokens taken alone\n", int(mode), accepted);
  }
}

TEST(EngineModel, RepeatedSystemPromptIsServedFromCache) {
  Engine e(model(), opts(AttnMode::kTpp));
  const auto reqs = chat_requests(2);
  const Result a = e.submit(reqs[0]).wait();
  const Result b = e.submit(reqs[1]).wait();
  EXPECT_EQ(a.usage.cached_tokens, 0);
  EXPECT_GT(b.usage.cached_tokens, 100);  // the system prompt
  EXPECT_LT(b.usage.cached_tokens, b.usage.prompt_tokens);
  std::printf("[engine] second request: %d of %d prompt tokens from the cache\n", b.usage.cached_tokens,
              b.usage.prompt_tokens);
}

}  // namespace
}  // namespace cs
