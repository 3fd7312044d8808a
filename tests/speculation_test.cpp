// Speculative decoding (engine/draft.h, Engine::Impl::verify_draft): drafts
// from the client's prediction and from the sequence's own text change how
// many steps a completion takes, never its tokens: greedy and sampled, alone
// and batched, in every attention mode, on every architecture.
#include "engine/draft.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "server/api_request.h"
#include "tiny_model.h"
#include "api_fixture.h"

namespace cs {
namespace {

TEST(Draft, LookupTakesTheLatestLongestMatch) {
  const std::vector<int32_t> text = {1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3};
  // Suffix [2, 3] occurs at 1 and 5; the latest (5) goes on with 7, 8, 5.
  EXPECT_EQ(lookup_draft(text, text, 3, 2, 4), (std::vector<int32_t>{7, 8, 5}));
  // A longer suffix wins: [5, 2, 3] is nowhere earlier, [2, 3] is.
  EXPECT_EQ(lookup_draft(text, text, 2, 2, 3), (std::vector<int32_t>{7, 8}));
  // Near the end: only what follows.
  const std::vector<int32_t> t2 = {4, 6, 4};
  EXPECT_EQ(lookup_draft(t2, t2, 5, 1, 2), (std::vector<int32_t>{6, 4}));
  // No earlier occurrence, or below min_n: nothing.
  EXPECT_TRUE(lookup_draft(text, std::vector<int32_t>{42, 43}, 3, 1, 2).empty());
  EXPECT_TRUE(lookup_draft(t2, t2, 5, 2, 2).empty());
  EXPECT_TRUE(lookup_draft(text, text, 0, 1, 4).empty());
  // Another corpus (a prediction): the text's tail found in it.
  const std::vector<int32_t> prediction = {10, 11, 12, 13, 14};
  EXPECT_EQ(lookup_draft(prediction, std::vector<int32_t>{99, 11, 12}, 2, 1, 8), (std::vector<int32_t>{13, 14}));
  // Nearest to where the output has reached, not the latest.
  const std::vector<int32_t> repeats = {5, 1, 5, 2, 5, 3, 5, 4};
  EXPECT_EQ(lookup_draft(repeats, std::vector<int32_t>{5}, 1, 1, 8, 3), (std::vector<int32_t>{2}));
  EXPECT_EQ(lookup_draft(repeats, std::vector<int32_t>{5}, 1, 1, 8), (std::vector<int32_t>{4}));
}

// Several occurrences: the continuation most of them agree on, token by
// token, those that part from it dropping out (a tie: the latest's).
TEST(Draft, LookupTakesWhatMostOccurrencesAgreeOn) {
  //                                  0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17
  const std::vector<int32_t> text = {1, 2, 7, 8, 4, 1, 2, 7, 6, 4, 1, 2, 9, 3, 4, 5, 1, 2};
  // [1, 2] goes on with 7 twice, 9 once (the latest): 7; then of those two
  // 8 and 6 tie, and 6 is the latest's.
  EXPECT_EQ(lookup_draft(text, text, 3, 2, 4), (std::vector<int32_t>{7, 6, 4}));
  EXPECT_EQ(lookup_draft(text, text, 1, 2, 4), (std::vector<int32_t>{7}));
  // A longer match decides before any vote: [5, 1, 2] is nowhere earlier,
  // [4, 1, 2] occurs twice, going on with 7 then 9: a tie, the latest's 9.
  EXPECT_EQ(lookup_draft(text, std::vector<int32_t>{4, 1, 2}, 2, 2, 3), (std::vector<int32_t>{9, 3}));
}

// The 2-gram index drafts what the plain scan does, as the text grows token
// by token (small vocabularies: many occurrences, long matches, ties).
TEST(Draft, ContextIndexDraftsWhatTheScanDoes) {
  std::mt19937 rng(5);
  for (int vocab : {2, 3, 5, 40}) {
    std::vector<int32_t> text;
    ContextIndex index;
    for (int i = 0; i < 400; ++i) {
      // Now and then a copy of an earlier stretch, as quoted text is.
      if (i > 20 && rng() % 7 == 0) {
        const size_t from = rng() % (text.size() - 10);
        for (size_t j = 0; j < 8; ++j) text.push_back(text[from + j]);
      } else {
        text.push_back(int32_t(rng() % uint32_t(vocab)));
      }
      index.sync(text);
      for (int k : {1, 5, 16})
        ASSERT_EQ(index.draft(text, k, 12), lookup_draft(text, text, k, 2, 12))
            << "vocab " << vocab << " length " << text.size() << " k " << k;
    }
  }
  // A text that is not the one indexed (shorter): indexed afresh.
  ContextIndex index;
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 3, 1, 2}, b = {4, 5, 4, 5};
  index.sync(a);
  EXPECT_EQ(index.draft(a, 3, 12), (std::vector<int32_t>{3, 1, 2}));
  index.sync(b);
  EXPECT_EQ(index.draft(b, 2, 12), lookup_draft(b, b, 2, 2, 12));
}

// The pacer picks the length that draws the most tokens per step time:
// longer as drafts are taken, shorter after a partial miss, one token when
// they keep missing, then resting.
TEST(Draft, PacerGrowsShrinksAndRests) {
  // Acceptance -> length, kRowCost 0.15: argmax over k of (1 - p^(k+1)) / (1 - p) / (1 + 0.15 k).
  EXPECT_EQ(DraftPacer::best_length(0.0), 1);
  EXPECT_EQ(DraftPacer::best_length(0.5), 2);
  EXPECT_EQ(DraftPacer::best_length(0.8), 5);
  EXPECT_EQ(DraftPacer::best_length(0.9), 8);
  EXPECT_EQ(DraftPacer::best_length(0.97), DraftPacer::kMaxDraft);
  EXPECT_EQ(DraftPacer::best_length(1.0), DraftPacer::kMaxDraft);
  DraftPacer p;
  EXPECT_EQ(p.next(), 5);  // p = 0.8 before any draft
  p.taken(5, 5);           // p = 0.94
  EXPECT_EQ(p.next(), 11);
  p.taken(11, 11);  // 0.982
  EXPECT_EQ(p.next(), DraftPacer::kMaxDraft);
  p.taken(16, 2);  // two taken, then a miss: 0.761
  EXPECT_EQ(p.next(), 4);
  for (int i = 0; i < DraftPacer::kMissesToRest; ++i) p.taken(p.next() ? p.next() : 1, 0);
  EXPECT_EQ(p.next(), 0);  // resting one step
  EXPECT_EQ(p.next(), 1);
  p.taken(1, 0);  // a fourth miss in a row: rests two steps
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 1);
  p.taken(1, 1);  // 0.70
  EXPECT_EQ(p.next(), 3);
}

const LlamaModel& model(const std::string& arch) {
  static std::map<std::string, std::unique_ptr<LlamaModel>> models;
  auto& m = models[arch];
  if (!m) m = LlamaModel::load(test::tiny_model("spec_" + arch, test::tiny_arch_shape(arch)));
  return *m;
}

EngineOptions options(AttnMode mode, bool speculate) {
  EngineOptions o = test::engine_options(mode, 8, 2);
  o.speculate = speculate;
  o.n_ctx = 512;
  return o;
}

// Prompts that repeat themselves (so the sequences' own text has matches).
std::vector<Request> requests(int n, int max_tokens, float temperature) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    for (int rep = 0; rep < 3; ++rep)
      for (int t = 0; t < 20; ++t) r.prompt.push_back(3 + (t * 13 + i * 5) % 200);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.seed = 7 + uint64_t(i);
    out.push_back(r);
  }
  return out;
}

// The reference completion with a few tokens changed: drafts from it are
// taken up to each change and rejected there.
std::vector<int32_t> edited(std::vector<int32_t> tokens) {
  for (size_t at : {5u, 12u, 21u})
    if (at < tokens.size()) tokens[at] = 3 + (tokens[at] + 1) % 200;
  return tokens;
}

// One test per architecture, so that CTest runs them side by side (under
// ASan the six in one test were two minutes of one core at CI's end).
class SpeculationArch : public testing::TestWithParam<const char*> {};

TEST_P(SpeculationArch, TokensAreTheSameWithDraftsOrWithout) {
  const char* arch = GetParam();
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kRelay, AttnMode::kNone})
    for (float temperature : {0.0f, 0.9f}) {
      const std::string what = std::string(arch) + " mode " + std::to_string(int(mode)) + " t " +
                               std::to_string(temperature);
      SCOPED_TRACE(what);
      const LlamaModel& m = model(arch);
      std::vector<Result> ref;
      {
        Engine off(m, options(mode, false));
        ref = test::run_each(off, requests(3, 40, temperature));
      }
      std::vector<Request> reqs = requests(3, 40, temperature);
      for (size_t i = 0; i < reqs.size(); ++i)
        if (i != 1) reqs[i].prediction = edited(ref[i].completions[0].tokens);  // request 1: its own text only
      Engine on(m, options(mode, true));
      const std::vector<Result> alone = test::run_each(on, reqs);
      const std::vector<Result> batched = test::run_all(on, reqs);
      test::expect_same_tokens(ref, alone, what + " alone");
      test::expect_same_tokens(ref, batched, what + " batched");
      for (const std::vector<Result>* rs : {&alone, &batched}) {
        const Usage& u = (*rs)[0].usage;
        EXPECT_GT(u.accepted_draft_tokens, 5);                 // the prediction's unchanged runs
        EXPECT_LT(u.accepted_draft_tokens, u.drafted_tokens);  // ... not its changes
        EXPECT_EQ(u.accepted_prediction_tokens + u.rejected_prediction_tokens, 40);
        EXPECT_EQ(int((*rs)[0].completions[0].tokens.size()), 40);
      }
      const EngineStats s = on.stats();
      EXPECT_GT(s.draft_accepted[int(DraftSource::kPrediction)], 0u);
      EXPECT_GE(s.drafted[int(DraftSource::kPrediction)], s.draft_accepted[int(DraftSource::kPrediction)]);
    }
}

INSTANTIATE_TEST_SUITE_P(Tiny, SpeculationArch, testing::ValuesIn(test::kTinyArchs),
                         [](const auto& info) { return test::arch_test_name(info.param); });

// A request asked again: its drafts come from what the tree kept of the
// first answer, and are all taken.
TEST(Speculation, ARepeatedRequestDraftsWhatTheTreeHolds) {
  const LlamaModel& m = model("llama3");
  Engine e(m, options(AttnMode::kTpp, true));
  std::vector<Request> reqs = requests(1, 60, 0.0f);
  reqs[0].prompt.resize(25);  // no repeats in the prompt: no drafts from its own text at first
  const Result first = test::run_each(e, reqs)[0];
  const EngineStats before = e.stats();
  const Result again = test::run_each(e, reqs)[0];
  const EngineStats after = e.stats();
  EXPECT_EQ(again.completions[0].tokens, first.completions[0].tokens);
  const int tree = int(DraftSource::kTree);
  EXPECT_GT(after.drafted[tree] - before.drafted[tree], 40u);
  EXPECT_EQ(after.draft_accepted[tree] - before.draft_accepted[tree], after.drafted[tree] - before.drafted[tree]);
}

// Off by the request, or by the engine: no drafts at all.
TEST(Speculation, OffIsOff) {
  const LlamaModel& m = model("llama3");
  std::vector<Request> reqs = requests(1, 20, 0.0f);
  reqs[0].prediction = {5, 6, 7};
  reqs[0].speculate = 0;
  Engine on(m, options(AttnMode::kTpp, true));
  EXPECT_EQ(test::run_each(on, reqs)[0].usage.drafted_tokens, 0);
  reqs[0].speculate = -1;
  Engine off(m, options(AttnMode::kTpp, false));
  EXPECT_EQ(test::run_each(off, reqs)[0].usage.drafted_tokens, 0);
  reqs[0].speculate = 1;
  EXPECT_GT(test::run_each(off, reqs)[0].usage.drafted_tokens, 0);
}

// The API's side: OpenAI's prediction (text or text parts) tokenized as
// plain text, "speculate", and clear errors.
TEST(Speculation, PredictionAndSpeculateFields) {
  const Tokenizer& tok = test::gpt2_tokenizer();
  const ApiLimits lim = test::api_limits(nullptr);
  const auto parse = [&](const std::string& extra) {
    return parse_completion_request(R"({"model": "m", "prompt": "x")" + extra + "}", lim).engine;
  };
  EXPECT_EQ(parse("").prediction, std::vector<int32_t>{});
  EXPECT_EQ(parse("").speculate, -1);
  const std::string text = "def f(x):\\n    return x <|endoftext|>";  // in JSON: a newline escaped
  const Request a = parse(R"(, "prediction": {"type": "content", "content": ")" + text + R"("}, "speculate": "off")");
  EXPECT_EQ(a.prediction, tok.encode("def f(x):\n    return x <|endoftext|>", false));  // no special token from it
  EXPECT_EQ(a.speculate, 0);
  const Request b = parse(
      R"J(, "prediction": {"type": "content", "content": [{"type": "text", "text": "def f"}, {"type": "text", "text": "(x)"}]}, "speculate": "auto")J");
  EXPECT_EQ(b.prediction, tok.encode("def f(x)", false));
  EXPECT_EQ(b.speculate, 1);
  const auto error = [&](const std::string& extra) -> std::string {
    try {
      parse(extra);
    } catch (const ApiError& e) {
      return e.param + ": " + e.message;
    }
    return "no error";
  };
  EXPECT_EQ(error(R"(, "prediction": "x")"), "prediction: prediction must be an object");
  EXPECT_EQ(error(R"(, "prediction": {"type": "text", "content": "x"})"), "prediction.type: prediction.type must be 'content'");
  EXPECT_EQ(error(R"(, "prediction": {"type": "content", "content": 5})"),
            "prediction.content: prediction.content must be a string or an array of text parts");
  EXPECT_EQ(error(R"(, "speculate": "always")"), "speculate: speculate must be 'auto' or 'off'");
}

}  // namespace
}  // namespace cs
