// The serving engine on a tiny random model (fast enough for the sanitizers):
// exactness across attention modes, batch sizes, retained prefixes and
// preemption; cached prompt tokens; cancellation; pool overflow; validation;
// n > 1; concurrent clients.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "engine/text_stream.h"
#include "engine_helpers.h"
#include "tiny_model.h"

namespace cs {
namespace {

using test::expect_same_tokens;
using test::run_all;
using test::run_each;
using test::shared_prompts;

const LlamaModel& tiny() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  return *m;
}

EngineOptions opts(AttnMode mode, int max_batch = 32) { return test::engine_options(mode, max_batch, 2); }

// The guarantee: a sequence's greedy tokens do not depend on the attention
// mode, on what it is batched with, on retained prefixes or on preemption.
TEST(Engine, GreedyTokensAreIdenticalAcrossModesBatchesAndPreemption) {
  const auto reqs = shared_prompts(12, 150, 24);
  Engine alone(tiny(), opts(AttnMode::kNone, 1));
  const auto ref = run_each(alone, reqs);
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kNone}) {
    Engine e(tiny(), opts(mode));
    expect_same_tokens(run_all(e, reqs), ref, std::string(attn_mode_name(mode)) + " batched");
    // Again: now the prompts' chunks are retained and skip their prefill.
    expect_same_tokens(run_all(e, reqs), ref, std::string(attn_mode_name(mode)) + " retained");
  }
  EngineOptions no_retain = opts(AttnMode::kTpp);
  no_retain.retain = false;
  Engine nr(tiny(), no_retain);
  expect_same_tokens(run_all(nr, reqs), ref, "retain off");
  // Prefill in small pieces: chunked prefill changes nothing either.
  EngineOptions chunked = opts(AttnMode::kTpp);
  chunked.step_tokens = 5;
  Engine ch(tiny(), chunked);
  expect_same_tokens(run_all(ch, reqs), ref, "step of 5 tokens");
}

// Sequences that outgrow a small pool while decoding are preempted (they
// leave, requeue and are recomputed) and still produce their own tokens.
TEST(Engine, PreemptedSequencesGiveTheSameTokens) {
  const auto reqs = shared_prompts(10, 150, 150);
  Engine alone(tiny(), opts(AttnMode::kNone, 1));
  const auto ref = run_each(alone, reqs);
  EngineOptions small = opts(AttnMode::kTpp);
  Engine probe(tiny(), small);
  small.kv_memory = 14 * probe.stats().kv.chunk_bytes;
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kNone}) {
    small.mode = mode;
    Engine tight(tiny(), small);
    expect_same_tokens(run_all(tight, reqs), ref, std::string("preempted, ") + attn_mode_name(mode));
    ASSERT_TRUE(tight.wait_idle(std::chrono::seconds(30)));
    EXPECT_GT(tight.stats().preemptions, 0u) << attn_mode_name(mode);
    EXPECT_EQ(tight.stats().kv.used, 0);
  }
}

TEST(Engine, RepeatedPromptIsServedFromCache) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  auto reqs = shared_prompts(1, 200, 4);
  const Result first = e.submit(reqs[0]).wait();
  EXPECT_EQ(first.usage.cached_tokens, 0);
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  const uint64_t prefilled = e.stats().prefill_tokens;
  EXPECT_EQ(prefilled, reqs[0].prompt.size());
  const Result again = e.submit(reqs[0]).wait();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  // Every chunk of the prompt (and of what it generated) is retained: all of
  // the prompt but its last token, which must run for its logits.
  const int n = int(reqs[0].prompt.size());
  EXPECT_EQ(again.usage.cached_tokens, n - 1);
  EXPECT_EQ(e.stats().prefill_tokens - prefilled, 1u);
  EXPECT_EQ(again.completions[0].tokens, first.completions[0].tokens);
  EXPECT_EQ(e.stats().prompt_tokens_cached, uint64_t(n - 1));
}

TEST(Engine, CancelFreesItsChunks) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  const KvStats before = e.stats().kv;
  Request r = shared_prompts(1, 300, 100000)[0];
  r.max_tokens = 900;
  RequestHandle h = e.submit(r);
  auto ev = h.next();  // the first token
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->kind, StreamEvent::Kind::kToken);
  h.cancel();
  const Result res = h.wait();
  EXPECT_EQ(res.completions[0].reason, FinishReason::kCancelled);
  while (!h.done()) h.next();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  const EngineStats s = e.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.kv.used, before.used);  // nothing held by a live sequence
  EXPECT_EQ(s.kv.used + s.kv.cached + s.kv.free, s.kv.chunks);
  EXPECT_EQ(s.cancelled, 1u);
}

TEST(Engine, DroppingTheHandleCancels) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request r = shared_prompts(1, 100, 5000)[0];
  r.max_tokens = 1000;
  {
    RequestHandle h = e.submit(r);
    ASSERT_TRUE(h.next().has_value());
  }
  e.shutdown(std::chrono::seconds(30));  // drains: returns once nothing runs
  EXPECT_EQ(e.stats().running, 0);
  EXPECT_EQ(e.stats().cancelled, 1u);
}

// More long requests than the pool holds at once: all complete, some after
// preemption, and each gets the tokens it gets alone.
TEST(Engine, RequestsOverflowingThePoolAllComplete) {
  EngineOptions o = opts(AttnMode::kTpp);
  Engine probe(tiny(), o);
  o.kv_memory = 40 * probe.stats().kv.chunk_bytes;
  Engine e(tiny(), o);
  std::vector<Request> reqs;
  for (int i = 0; i < 64; ++i) {
    Request r;
    for (int t = 0; t < 90 + i % 40; ++t) r.prompt.push_back(3 + (i * 13 + t * 5) % 268);
    r.max_tokens = 100;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  const auto got = run_all(e, reqs);
  for (const Result& r : got) {
    EXPECT_EQ(r.completions[0].reason, FinishReason::kLength);
    EXPECT_EQ(r.completions[0].tokens.size(), 100u);
  }
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  EXPECT_GT(e.stats().preemptions, 0u);
  EXPECT_EQ(e.stats().kv.used, 0);
  Engine ref(tiny(), opts(AttnMode::kTpp, 1));
  std::vector<Request> some(reqs.begin(), reqs.begin() + 8);
  expect_same_tokens(std::vector<Result>(got.begin(), got.begin() + 8), run_each(ref, some), "overflow vs alone");
}

void expect_refused(Engine& e, const Request& r, const std::string& message, const std::string& param) {
  try {
    e.submit(r);
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const RequestError& err) {
    EXPECT_EQ(err.what(), message);
    EXPECT_EQ(err.param(), param);
  }
}

TEST(Engine, InvalidRequestsAreRefusedWithTheirReason) {
  EngineOptions o = opts(AttnMode::kTpp);
  o.n_ctx = 512;
  Engine probe(tiny(), o);
  o.kv_memory = 4 * probe.stats().kv.chunk_bytes;
  Engine e(tiny(), o);
  Request ok;
  ok.prompt = {5, 6, 7};
  ok.max_tokens = 2;
  Request r = ok;
  r.prompt.clear();
  expect_refused(e, r, "the prompt is empty", "prompt");
  r = ok;
  r.prompt[1] = 100000;
  expect_refused(e, r, "prompt token 100000 is not in the vocabulary (0 to 270)", "prompt");
  r = ok;
  r.prompt.assign(600, 5);
  expect_refused(e, r, "the prompt has 600 tokens, more than fits the context of 512", "prompt");
  r = ok;
  r.prompt.assign(300, 5);
  expect_refused(e, r, "the prompt has 300 tokens and needs 5 chunks of KV memory; the pool holds 4 (0 MiB)", "prompt");
  r = ok;
  r.sampling.temperature = NAN;
  expect_refused(e, r, "temperature must be a number in [0, 100]", "temperature");
  r = ok;
  r.sampling.top_p = 0;
  expect_refused(e, r, "top_p must be a number in (0, 1]", "top_p");
  r = ok;
  r.sampling.repeat_penalty = INFINITY;
  expect_refused(e, r, "repeat_penalty must be a number in (0, 100]", "repeat_penalty");
  r = ok;
  r.n = 33;
  expect_refused(e, r, "n must be between 1 and 32", "n");
  r = ok;
  r.max_tokens = -1;
  expect_refused(e, r, "max_tokens must not be negative", "max_tokens");
  r = ok;
  r.logprobs = 21;
  expect_refused(e, r, "logprobs must be at most 20", "logprobs");
  r = ok;
  r.grammar_triggers = {{"<tool_call>"}};
  expect_refused(e, r, "a constraint's triggers need the constraint", "grammar");
  r.grammar = e.compile_grammar({GrammarKind::kRegex, "a+"});
  r.grammar_triggers = {{""}};
  expect_refused(e, r, "a constraint's trigger must not be empty", "grammar");
  r.grammar_triggers = {{"<a>", false, 4}};
  expect_refused(e, r, "a constraint's trigger skips past its end", "grammar");
  // The engine goes on serving.
  EXPECT_EQ(e.submit(ok).wait().completions[0].tokens.size() + 0, e.submit(ok).wait().completions[0].tokens.size());
  EXPECT_EQ(e.stats().requests, 2u);
}

TEST(Engine, ParallelCompletionsForkFromOnePrefill) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request r = shared_prompts(1, 130, 12)[0];
  r.n = 3;
  const Result greedy = e.submit(r).wait();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  ASSERT_EQ(greedy.completions.size(), 3u);
  EXPECT_EQ(e.stats().prefill_tokens, r.prompt.size());  // one prefill for three completions
  EXPECT_EQ(greedy.completions[1].tokens, greedy.completions[0].tokens);
  EXPECT_EQ(greedy.completions[2].tokens, greedy.completions[0].tokens);
  EXPECT_EQ(greedy.usage.completion_tokens, 36);
  // Sampled: completion i uses seed + i, so it equals a lone request with that seed.
  r.sampling.temperature = 1.5f;
  r.sampling.seed = 40;
  const Result sampled = e.submit(r).wait();
  Request one = r;
  one.n = 1;
  one.sampling.seed = 42;
  EXPECT_EQ(e.submit(one).wait().completions[0].tokens, sampled.completions[2].tokens);
  EXPECT_NE(sampled.completions[0].tokens, sampled.completions[1].tokens);
}

TEST(Engine, StreamedEventsMakeTheResult) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request r = shared_prompts(1, 70, 20)[0];
  r.n = 2;
  r.sampling.temperature = 1.0f;
  r.logprobs = 3;
  RequestHandle h = e.submit(r);
  std::string text[2];
  int tokens[2] = {0, 0}, finished = 0;
  while (auto ev = h.next()) {
    if (ev->kind == StreamEvent::Kind::kFinish) {
      ++finished;
      EXPECT_EQ(ev->reason, FinishReason::kLength);
      continue;
    }
    text[ev->index] += ev->text;
    if (ev->token >= 0) {
      ++tokens[ev->index];
      ASSERT_EQ(ev->top.size(), 3u);
      EXPECT_LE(ev->logprob, ev->top[0].logprob);
      EXPECT_GE(ev->top[0].logprob, ev->top[1].logprob);
    }
  }
  EXPECT_EQ(finished, 2);
  EXPECT_TRUE(h.done());
  const Result res = h.wait();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(text[i], res.completions[size_t(i)].text);
    EXPECT_EQ(tokens[i], 20);
  }
  EXPECT_GE(res.timings.ttft_s, res.timings.queued_s);
  EXPECT_GE(res.timings.total_s, res.timings.ttft_s);
}

TEST(Engine, ZeroMaxTokensEndsAtOnce) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request r;
  r.prompt = {5, 6};
  r.max_tokens = 0;
  r.n = 2;
  const Result res = e.submit(r).wait();
  ASSERT_EQ(res.completions.size(), 2u);
  EXPECT_EQ(res.completions[1].reason, FinishReason::kLength);
  EXPECT_EQ(res.usage.prompt_tokens, 2);
  EXPECT_EQ(res.usage.completion_tokens, 0);
}

// A thought's budget: after that many tokens of a thought the prompt opened,
// the close comes instead of samples (then sampling goes on); the tokens
// before the close are the unbounded run's; a reply that never opens a
// thought is not touched.
TEST(Engine, AThoughtEndsAtItsBudget) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request free_run = shared_prompts(1, 40, 12)[0];
  const std::vector<int32_t> unbounded = e.submit(free_run).wait().completions[0].tokens;
  ASSERT_EQ(unbounded.size(), 12u);
  Request r = free_run;
  r.think_budget = 4;
  r.think_open = true;
  r.think_end = {7, 8, 9};
  const std::vector<int32_t> got = e.submit(r).wait().completions[0].tokens;
  ASSERT_EQ(got.size(), 12u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 4), std::vector<int32_t>(unbounded.begin(), unbounded.begin() + 4));
  EXPECT_EQ(std::vector<int32_t>(got.begin() + 4, got.begin() + 7), (std::vector<int32_t>{7, 8, 9}));
  // Not opened by the prompt, and the tiny vocabulary never writes "<think>": untouched.
  r.think_open = false;
  EXPECT_EQ(e.submit(r).wait().completions[0].tokens, unbounded);
}

// A close the reply has begun itself is not cut by the budget's: while the
// thought ends with the close's first characters the forced close waits (a
// second close would leave them in the thought), and comes after the first
// token where it no longer does.
TEST(Engine, AThoughtsBudgetWaitsForACloseTheReplyBegan) {
  Engine e(tiny(), opts(AttnMode::kTpp));
  Request free_run = shared_prompts(1, 40, 12)[0];
  const std::vector<int32_t> unbounded = e.submit(free_run).wait().completions[0].tokens;
  auto text_of = [&](int n) {
    Request r = free_run;
    r.max_tokens = n;
    return e.submit(r).wait().completions[0].text;
  };
  const std::string t3 = text_of(3), t4 = text_of(4), t5 = text_of(5);
  ASSERT_TRUE(t4.starts_with(t3) && t4.size() > t3.size());
  Request r = free_run;
  r.think_budget = 4;
  r.think_open = true;
  r.think_end = {7, 8, 9};
  r.think_stop = t4.substr(t3.size()) + "\x01";  // the 4th token's text begins it
  for (size_t from = t5.size() + 1 - r.think_stop.size(); from < t5.size(); ++from)
    ASSERT_FALSE(r.think_stop.starts_with(t5.substr(from))) << "the 5th token must not go on with the close";
  const std::vector<int32_t> got = e.submit(r).wait().completions[0].tokens;
  ASSERT_EQ(got.size(), 12u);
  // The close comes after the 5th token (the thought is tracked in the
  // tokens' own bytes, so a token that is the first byte of a character, as
  // the 5th is here, does not delay it).
  const size_t close = size_t(std::search(got.begin(), got.end(), r.think_end.begin(), r.think_end.end()) - got.begin());
  EXPECT_EQ(close, 5u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + long(close)),
            std::vector<int32_t>(unbounded.begin(), unbounded.begin() + long(close)));
}

TEST(Engine, ShutdownCancelsWhatIsLeft) {
  auto e = std::make_unique<Engine>(tiny(), opts(AttnMode::kTpp));
  Request r = shared_prompts(1, 50, 100000)[0];
  r.max_tokens = 900;
  RequestHandle h = e->submit(r);
  ASSERT_TRUE(h.next().has_value());
  e->shutdown();
  EXPECT_EQ(h.wait().completions[0].reason, FinishReason::kCancelled);
  try {
    e->submit(r);
    ADD_FAILURE() << "accepted after shutdown";
  } catch (const RequestError& err) {
    EXPECT_STREQ(err.what(), "the engine is shutting down");
  }
  e.reset();
  EXPECT_TRUE(h.done() || h.next().has_value());
}

// Clients on many threads submitting and cancelling at once (run under
// ThreadSanitizer in CI): every request ends, and the pool is whole after.
// Fairness (scheduler.h): a request whose n completions fill the batch does
// not keep a short request waiting for all of them (before, n counted the
// whole batch and the short one waited for the last of 4 x 300 tokens); both
// give the tokens they give alone.
TEST(EngineFairness, AShortRequestIsNotStarvedBehindALongOne) {
  auto reqs = shared_prompts(2, 40, 8);
  Request longr = reqs[0], shortr = reqs[1];
  longr.n = 4;
  longr.max_tokens = 300;
  longr.sampling.temperature = 0;
  Engine alone(tiny(), opts(AttnMode::kTpp, 4));
  const Result ref_long = alone.submit(longr).wait(), ref_short = alone.submit(shortr).wait();
  Engine e(tiny(), opts(AttnMode::kTpp, 4));
  RequestHandle hl = e.submit(longr);
  for (int i = 0; i < 3000 && e.stats().generated_tokens < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_GE(e.stats().generated_tokens, 8u);
  const Result rs = e.submit(shortr).wait();
  const uint64_t at_short_end = e.stats().generated_tokens;
  const Result rl = hl.wait();
  EXPECT_LT(at_short_end, 600u) << "the short request waited for most of the long one";
  EXPECT_GT(e.stats().yields, 0u);
  expect_same_tokens({rs}, {ref_short}, "short, beside the long one");
  expect_same_tokens({rl}, {ref_long}, "long, having yielded");
}

// A stream whose client stops reading is paused once it has left
// kPauseBacklog events unread (it no longer takes steps), others are served
// meanwhile, and it goes on when the client reads again, with the tokens it
// gives alone.
TEST(EngineFairness, AStreamItsClientDoesNotReadIsPausedAndGoesOnExactly) {
  auto reqs = shared_prompts(2, 40, 600);
  const Request a = reqs[0];
  Request b = reqs[1];
  b.max_tokens = 16;
  Engine alone(tiny(), opts(AttnMode::kTpp, 4));
  const Result ref = alone.submit(a).wait();
  Engine e(tiny(), opts(AttnMode::kTpp, 4));
  RequestHandle h = e.submit(a);
  std::vector<int32_t> got;
  const auto take = [&](const StreamEvent& ev) {
    if (ev.kind == StreamEvent::Kind::kToken && ev.token >= 0 && !ev.end_of_generation) got.push_back(ev.token);
  };
  auto first = h.next(std::chrono::seconds(30));  // it reads once, then stops
  ASSERT_TRUE(first);
  take(*first);
  for (int i = 0; i < 6000 && e.stats().pauses == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GT(e.stats().pauses, 0u);
  // Paused, it is out of the batch: nothing runs (it waits for its client).
  for (int i = 0; i < 6000 && e.stats().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(e.stats().running, 0);
  EXPECT_EQ(e.stats().waiting, 1);
  const uint64_t paused_at = e.stats().generated_tokens;
  EXPECT_LT(paused_at, 300u);
  const Result rb = e.submit(b).wait();
  // (The stats are published after the step that ended b.)
  const uint64_t expect = paused_at + uint64_t(rb.usage.completion_tokens);
  for (int i = 0; i < 6000 && (e.stats().generated_tokens < expect || e.stats().running > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e.stats().generated_tokens, expect) << "the paused stream took steps";
  for (;;) {
    auto ev = h.next(std::chrono::seconds(30));
    ASSERT_TRUE(ev);
    if (ev->kind == StreamEvent::Kind::kFinish) break;
    take(*ev);
  }
  EXPECT_EQ(got, ref.completions[0].tokens);
}

// KV events announce a prompt's blocks as its prefill starts (work in
// progress), so that a router sends a burst of the same prompt to the
// replica computing it: here the first events after start-up hold every
// full block of a 600-token prompt whose prefill takes 10 steps of 64
// tokens (before, they came 4 blocks a step, as each was computed).
TEST(EngineKvEvents, APromptIsAnnouncedAsItsPrefillStarts) {
  EngineOptions o = opts(AttnMode::kTpp, 4);
  o.step_tokens = 64;
  o.kv_event_block_size = 16;
  std::mutex mu;
  std::vector<std::vector<BlockEvent>> batches;
  o.kv_events = [&](std::vector<BlockEvent> ev) {
    std::lock_guard lock(mu);
    batches.push_back(std::move(ev));
  };
  Engine e(tiny(), o);
  const Request r = shared_prompts(1, 600, 2)[0];
  e.submit(r).wait();
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  std::lock_guard lock(mu);
  ASSERT_FALSE(batches.empty());
  size_t stored = 0;
  for (const BlockEvent& ev : batches.front()) stored += ev.kind == BlockEvent::Kind::kStored;
  EXPECT_EQ(stored, r.prompt.size() / 16);
  // And nothing is announced twice, or removed, as the chunks come to hold them.
  size_t later = 0;
  for (size_t b = 1; b < batches.size(); ++b)
    for (const BlockEvent& ev : batches[b])
      later += ev.kind == BlockEvent::Kind::kStored && ev.tokens.size() == 16 &&
               std::equal(ev.tokens.begin(), ev.tokens.end(), r.prompt.begin());
  EXPECT_EQ(later, 0u);
}

TEST(EngineThreads, ConcurrentSubmitAndCancel) {
  EngineOptions o = opts(AttnMode::kTpp, 8);
  o.threads = 1;
  Engine e(tiny(), o);
  std::atomic<int> ended{0}, cancelled{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 6; ++i) {
        Request r = shared_prompts(1, 40 + 10 * (c % 3), 6 + i)[0];
        r.prompt.push_back(3 + c);
        RequestHandle h = e.submit(r);
        if ((c + i) % 3 == 0) {
          h.next();
          h.cancel();
        }
        const Result res = h.wait();
        ++ended;
        if (res.completions[0].reason == FinishReason::kCancelled) ++cancelled;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ended.load(), 48);
  e.shutdown(std::chrono::seconds(30));
  const EngineStats s = e.stats();
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.kv.used, 0);
  EXPECT_EQ(s.requests, 48u);
  EXPECT_EQ(s.cancelled, uint64_t(cancelled.load()));
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// EngineOptions::profile: the same tokens, and steps counted by kind (a
// request's prefill step, then one decode step per further token).
TEST(Engine, AProfiledEngineCountsItsStepsAndGivesTheSameTokens) {
  const auto reqs = shared_prompts(1, 40, 6);
  Engine plain(tiny(), opts(AttnMode::kTpp));
  EngineOptions o = opts(AttnMode::kTpp);
  o.profile = true;
  Engine timed(tiny(), o);
  Request r = reqs[0];
  r.speculate = 0;  // off: one decode row per step
  const std::vector<Request> one{r};
  expect_same_tokens(run_all(timed, one), run_all(plain, one), "profiled");
  ASSERT_TRUE(timed.wait_idle(std::chrono::seconds(10)));
  const EngineStats s = timed.stats(), off = plain.stats();
  EXPECT_EQ(s.prefill_profile.steps, 1u);
  EXPECT_EQ(s.prefill_profile.rows, uint64_t(r.prompt.size()));
  EXPECT_EQ(s.decode_profile.steps, uint64_t(r.max_tokens - 1));
  EXPECT_EQ(s.decode_profile.rows, uint64_t(r.max_tokens - 1));
  EXPECT_EQ(s.decode_profile.ops.calls[int(ProfOp::kHead)], uint64_t(r.max_tokens - 1));
  EXPECT_GT(s.decode_profile.step_s, s.decode_profile.ops.total());
  EXPECT_EQ(off.prefill_profile.steps + off.decode_profile.steps, 0u);
}

}  // namespace
}  // namespace cs

TEST(TextStream, BegunLengthIsTheLongestProperPrefixOfTheMarkerAtTheEnd) {
  EXPECT_EQ(cs::begun_length("french<", "<|end|>"), 1u);
  EXPECT_EQ(cs::begun_length("french<|en", "<|end|>"), 4u);
  EXPECT_EQ(cs::begun_length("french<|end|>", "<|end|>"), 0u);  // whole: not begun, ended
  EXPECT_EQ(cs::begun_length("french", "<|end|>"), 0u);
  EXPECT_EQ(cs::begun_length("aa", "aab"), 2u);
  EXPECT_EQ(cs::begun_length("a", ""), 0u);
  EXPECT_EQ(cs::begun_length("", "<|end|>"), 0u);
}
