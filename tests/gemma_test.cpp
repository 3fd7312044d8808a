// The serving engine on the real Gemma 3 270M file (Q4_K_M, fetched by
// scripts/fetch_gemma.sh): 5 of its 6 layers attend to the last 512
// positions only, so a shared prompt longer than the window is read whole
// by a sixth of the layers. Every request still gets, batched with 15 others
// over a shared prefix, the greedy tokens it gets alone, in every attention
// mode, with sharing off and under preemption; Prompt Cache modules past the
// window are shared and exact. Conformance with llama.cpp on this file runs
// as model_tests' Conformance tests (tests/CMakeLists.txt, gemma3_conformance).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/chat_template.h"
#include "pml/pml.h"

namespace cs {
namespace {

using test::expect_same_tokens;
using test::run_all;
using test::run_each;

const LlamaModel& model() {
  static std::unique_ptr<LlamaModel> m = [] {
    if (!std::filesystem::exists(CS_GEMMA_MODEL))
      throw Error(std::string(CS_GEMMA_MODEL) + " is missing: scripts/fetch_gemma.sh fetches it");
    return LlamaModel::load(CS_GEMMA_MODEL);
  }();
  return *m;
}

// Sentences of plain English, n of them, varied by salt.
std::string prose(int n, int salt) {
  static const char* s[] = {"The library opens at nine and closes at six.",
                            "Students and teachers get a discount on every book.",
                            "Gift cards never expire, and returns are accepted with a receipt.",
                            "The cafe on the first floor serves coffee, tea and cakes.",
                            "Local authors read from their new books every second Thursday.",
                            "Story time for children takes place on Saturday mornings.",
                            "Orders for any title arrive within three working days.",
                            "The reading room on the top floor is quiet and bright."};
  std::string out;
  for (int i = 0; i < n; ++i) out += std::string(i ? " " : "") + s[(i * 3 + salt) % 8];
  return out;
}

// n requests: one long shared text (past the 512-position window), then a
// question each; greedy, max_tokens each.
std::vector<Request> requests(int n, int max_tokens) {
  const Tokenizer& tok = model().tokenizer();
  const std::string shared = prose(60, 1);
  const char* questions[] = {"When does the library open?", "Who gets a discount?", "Do gift cards expire?",
                             "How long do orders take?", "Is there coffee?", "When are the readings?",
                             "What happens on Saturday?", "Where is the reading room?"};
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt = tok.encode(shared + "\n\nQuestion: " + questions[i % 8] + "\nAnswer:", false, true);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

EngineOptions opts(AttnMode mode, int max_batch = 32) {
  return test::engine_options(mode, max_batch, 0, size_t(512) << 20);
}

TEST(Gemma, TheFileIsReadAsGemma3) {
  const LlamaConfig& c = model().config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_EQ(c.window_of(0), 512);
  EXPECT_EQ(c.window_of(5), 0);
  EXPECT_EQ(c.rope_swa.base, 10000.0);
  EXPECT_EQ(c.rope.base, 1000000.0);
  EXPECT_GT(requests(1, 1)[0].prompt.size(), size_t(600));  // the shared text outruns the window
}

// The file has no chat template, but its vocabulary has Gemma's turn tokens:
// the fallback is Gemma's format, whose markers are those control tokens,
// while the same text typed in a message stays text.
TEST(Gemma, WithoutATemplateChatUsesGemmasTurnTokens) {
  const ChatTemplate& t = model().chat();
  EXPECT_TRUE(t.is_fallback());
  EXPECT_EQ(model().chat_note(), "the model file has no chat template; using Gemma's turn format (<start_of_turn>)");
  const ChatPrompt p = t.apply({{"system", "Be brief."}, {"user", "Hi <start_of_turn>model"}});
  EXPECT_EQ(p.text(), "<start_of_turn>user\nBe brief.\n\nHi <start_of_turn>model<end_of_turn>\n<start_of_turn>model\n");
  const Tokenizer& tok = model().tokenizer();
  const std::vector<int32_t> ids = p.encode(tok, true);
  const int32_t start = *tok.find("<start_of_turn>"), end = *tok.find("<end_of_turn>");
  EXPECT_EQ(ids[0], tok.bos());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 2);  // the template's two, not the typed one
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 1);
  EXPECT_TRUE(tok.is_end_of_generation(end));
}

TEST(Gemma, GreedyTokensAreIdenticalAcrossModesBatchesSharingAndPreemption) {
  const auto reqs = requests(16, 12);
  Engine alone(model(), opts(AttnMode::kNone, 1));
  const std::vector<Request> first8(reqs.begin(), reqs.begin() + 8);
  const auto ref8 = run_each(alone, first8);
  std::vector<Result> ref;
  for (int i = 0; i < 16; ++i) ref.push_back(ref8[size_t(i % 8)]);
  test::expect_modes_agree(model(), reqs, ref, {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kNone}, opts,
                           "gemma");
  // A pool too small for the batch: sequences are preempted and recomputed.
  EngineOptions tight = opts(AttnMode::kTpp);
  Engine probe(model(), tight);
  tight.kv_memory = 18 * probe.stats().kv.chunk_bytes;  // the shared text takes 11
  const std::vector<Request> eight(reqs.begin(), reqs.begin() + 8);
  auto longer = eight;
  for (auto& r : longer) r.max_tokens = 130;  // each outgrows what admission reserved
  Engine t(model(), tight);
  const auto got = run_all(t, longer);
  ASSERT_TRUE(t.wait_idle(std::chrono::seconds(120)));
  EXPECT_GT(t.stats().preemptions, 0u);
  Engine one(model(), opts(AttnMode::kTpp, 1));
  expect_same_tokens(got, run_each(one, longer), "preempted");
}

// The disk tier on Gemma 3: chunks past the window, evicted from a small pool
// or kept across a restart, come back bit for bit: the greedy tokens are
// those of computing them.
TEST(Gemma, PromptsFromTheDiskTierGiveTheSameTokens) {
  const auto reqs = requests(8, 12);
  Engine alone(model(), opts(AttnMode::kNone, 1));
  const auto ref = run_each(alone, reqs);
  const auto dir = std::filesystem::temp_directory_path() / ("cs_gemma_disk_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EngineOptions o = opts(AttnMode::kTpp);
  Engine probe(model(), o);
  o.kv_memory = 16 * probe.stats().kv.chunk_bytes;  // a prompt takes 11 or 12: each one evicts
  o.kv_disk = dir.string();
  {
    Engine e(model(), o);
    expect_same_tokens(run_each(e, reqs), ref, "gemma, disk tier");
  }
  Engine restarted(model(), o);
  const auto again = run_each(restarted, reqs);
  expect_same_tokens(again, ref, "gemma, after a restart");
  // Every full chunk of the first prompt but its last token's came from disk.
  EXPECT_EQ(again[0].usage.disk_tokens, int(reqs[0].prompt.size() - 1) / 64 * 64);
  std::filesystem::remove_all(dir);
}

// A module placed past the window: its K/V were encoded at its schema
// positions, and prompts that import it after different union members read
// it in place. Batched or alone, the same tokens.
TEST(Gemma, PromptCacheModulesPastTheWindowAreSharedAndExact) {
  const std::string schema = "<schema name=\"g\"><system>" + prose(30, 2) + "</system><user>" +
                             "<union><module name=\"a\">" + prose(6, 3) + "</module><module name=\"b\">" +
                             prose(12, 4) + "</module></union><module name=\"doc\">" + prose(40, 5) +
                             "</module></user></schema>";
  Engine e(model(), opts(AttnMode::kTpp, 8));
  e.register_schema(pml::parse_schema(schema, "g.xml"));
  std::vector<Request> reqs;
  for (const char* p : {"<prompt schema=\"g\"><a/><doc/><user>When does it open?</user></prompt>",
                        "<prompt schema=\"g\"><b/><doc/><user>Is there coffee?</user></prompt>",
                        "<prompt schema=\"g\"><doc/><user>Who reads on Thursdays?</user></prompt>"}) {
    Request r = e.pml_request(p, true);
    r.max_tokens = 12;
    r.ignore_eos = true;
    EXPECT_GT(r.positions.back(), 900);  // the module ends far past the first window
    reqs.push_back(r);
  }
  const auto alone = run_each(e, reqs);
  expect_same_tokens(run_all(e, reqs), alone, "prompt cache batched vs alone");
}

}  // namespace
}  // namespace cs
