// Every supported architecture on a tiny random model of its own (llama3:
// GQA 4:1, tied embeddings, rope_freqs; qwen2: Q/K/V biases, RoPE by halves;
// qwen3: per-head Q/K norms, head_dim 128 over a 128-wide embedding):
// the configuration read, the fast path against the float reference, and the
// engine's guarantees (identical greedy tokens across attention modes,
// batches, retained prefixes and preemption; Prompt Cache modules shared and
// exact). engine_test.cpp and prompt_cache_test.cpp cover plain llama in more
// depth. Also: the errors for what is not supported.
#include <gtest/gtest.h>

#include <map>

#include "engine_helpers.h"
#include "model/perplexity.h"
#include "model/reference.h"
#include "pml/pml.h"
#include "tiny_model.h"

namespace cs {
namespace {

using test::expect_same_tokens;
using test::run_all;
using test::run_each;
using test::shared_prompts;
using test::words;

const LlamaModel& model(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<LlamaModel>> models;
  auto& m = models[variant];
  if (!m) m = LlamaModel::load(test::tiny_model("tiny_" + variant, test::tiny_arch_shape(variant)));
  return *m;
}

class Arch : public testing::TestWithParam<const char*> {
 protected:
  const LlamaModel& m() const { return model(GetParam()); }
};

TEST_P(Arch, ConfigurationIsRead) {
  const LlamaConfig& c = m().config();
  const std::string v = GetParam();
  EXPECT_EQ(c.arch, v == "llama3" ? "llama" : v);
  EXPECT_EQ(c.head_dim, v == "qwen3" ? 128 : 64);
  EXPECT_EQ(c.q_width(), c.n_heads * c.head_dim);
  EXPECT_EQ(c.rope.style, v == "llama3" ? RopeStyle::kAdjacent : RopeStyle::kHalves);
  EXPECT_EQ(c.rope.factors.size(), v == "llama3" ? size_t(32) : size_t(0));
  EXPECT_EQ(c.tied_embeddings, v != "qwen2");
  const LlamaLayer& L = m().layers()[0];
  EXPECT_EQ(L.bq.size(), v == "qwen2" ? size_t(c.q_width()) : size_t(0));
  EXPECT_EQ(L.bv.size(), v == "qwen2" ? size_t(c.kv_width()) : size_t(0));
  EXPECT_EQ(L.q_norm.size(), v == "qwen3" ? size_t(128) : size_t(0));
  EXPECT_EQ(c.n_heads / c.n_kv_heads, v == "llama3" ? 4 : 2);
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + (i * 37) % 268);
  return v;
}

// The fast path (int8 matmul inputs, chunked attention) against the float
// reference, which implements each architecture's departures separately:
// they agree to the int8 noise, as on plain llama (perplexity_test.cpp).
TEST_P(Arch, FastPathAgreesWithTheFloatReference) {
  const ReferenceModel ref(m());
  PerplexityOptions o;
  o.n_ctx = 64;
  o.kl_against = &ref;
  const PerplexityResult r = perplexity(m(), some_tokens(128), o);
  ASSERT_EQ(r.count, 2 * 31);
  EXPECT_NEAR(r.ppl(), r.ref_ppl(), 0.02 * r.ref_ppl());
  double kl_max = 0;
  for (double k : r.kl) kl_max = std::max(kl_max, k);
  EXPECT_LT(kl_max, 1e-3) << GetParam();
  EXPECT_LE(r.top1_differ, 1) << GetParam();
}

TEST_P(Arch, GreedyTokensAreIdenticalAcrossModesBatchesAndPreemption) {
  const auto reqs = shared_prompts(8, 150, 120);
  Engine alone(m(), test::engine_options(AttnMode::kNone, 1, 2));
  const auto ref = run_each(alone, reqs);
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kNone}) {
    Engine e(m(), test::engine_options(mode, 32, 2));
    expect_same_tokens(run_all(e, reqs), ref, std::string(GetParam()) + " " + attn_mode_name(mode) + " batched");
    expect_same_tokens(run_all(e, reqs), ref, std::string(GetParam()) + " " + attn_mode_name(mode) + " retained");
  }
  EngineOptions small = test::engine_options(AttnMode::kTpp, 32, 2);
  Engine probe(m(), small);
  small.kv_memory = 14 * probe.stats().kv.chunk_bytes;
  Engine tight(m(), small);
  expect_same_tokens(run_all(tight, reqs), ref, std::string(GetParam()) + " preempted");
  ASSERT_TRUE(tight.wait_idle(std::chrono::seconds(30)));
  EXPECT_GT(tight.stats().preemptions, 0u);
}

// A module after a union (never a shared prefix) is encoded once at its
// schema positions; prompts importing it batched give their tokens alone.
TEST_P(Arch, PromptCacheModulesAreSharedAndExact) {
  const std::string schema = "<schema name=\"s\"><system>" + words(40, 1) + "</system><user>" +
                             "<union><module name=\"u1\">" + words(30, 2) + "</module><module name=\"u2\">" +
                             words(45, 3) + "</module></union><module name=\"mid\">" + words(80, 4) +
                             "</module></user></schema>";
  Engine e(m(), test::engine_options(AttnMode::kTpp, 8, 2));
  e.register_schema(pml::parse_schema(schema, "s.xml"));
  std::vector<Request> reqs;
  for (const char* p : {"<prompt schema=\"s\"><u1/><mid/><user>is it on the mat</user></prompt>",
                        "<prompt schema=\"s\"><u2/><mid/><user>a cat</user></prompt>",
                        "<prompt schema=\"s\"><mid/><user>the the</user></prompt>"}) {
    Request r = e.pml_request(p, true);
    r.max_tokens = 24;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  const auto alone = run_each(e, reqs);
  expect_same_tokens(run_all(e, reqs), alone, std::string(GetParam()) + " prompt cache batched vs alone");
}

INSTANTIATE_TEST_SUITE_P(Tiny, Arch, testing::Values("llama3", "qwen2", "qwen3"));

// What the loader refuses, each with its reason.
std::string load_error(test::TinyModelShape shape, const std::string& name) {
  try {
    LlamaModel::load(test::tiny_model(name, shape));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ArchErrors, UnknownArchitectureListsTheSupportedOnes) {
  test::TinyModelShape s;
  s.arch = "mamba";
  EXPECT_NE(load_error(s, "tiny_mamba").find("unsupported architecture 'mamba' (supported: llama, qwen2, qwen3)"),
            std::string::npos);
}

TEST(ArchErrors, AFileWithoutItsArchitecturesTensorsIsRefused) {
  for (const char* v : {"qwen2", "qwen3"}) {
    test::TinyModelShape s = test::tiny_arch_shape(v);
    s.arch_tensors = false;
    const std::string err = load_error(s, std::string("tiny_bare_") + v);
    const std::string missing = std::string(v) == "qwen2" ? "attn_q.bias" : "attn_q_norm.weight";
    EXPECT_NE(err.find("tensor 'blk.0." + missing + "' is missing (the architecture requires it)"), std::string::npos)
        << err;
  }
}

TEST(ArchErrors, UnsupportedRopeScalingIsRefused) {
  test::TinyModelShape s;
  s.rope_scaling = "yarn";
  EXPECT_NE(load_error(s, "tiny_yarn").find("RoPE scaling 'yarn' is not supported (supported: none, linear)"),
            std::string::npos);
}

}  // namespace
}  // namespace cs
