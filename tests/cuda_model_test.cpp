// A quantized model on the GPU (model/cuda_ops.h) against the CPU: its
// matrices on the device, every layer step there; with the KV on the host,
// the same logits bit for bit; with the KV on the GPU, the same greedy
// tokens in every attention mode, alone and batched, and the CPU's up to a
// near-tie. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "base/cuda.h"
#include "cache/contiguous_kv.h"
#include "cuda_helpers.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/cuda_ops.h"
#include "model/perplexity.h"

namespace cs {
namespace {

// The default model, or the file CS_GPU_TEST_MODEL names (the GPU machine
// makes its own: bench/gpu/engine_check.sh; the default model's file does
// not travel there).
std::string model_file() {
  const char* f = std::getenv("CS_GPU_TEST_MODEL");
  return f && *f ? f : CS_MODEL;
}
const LlamaModel& cpu_model() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(model_file());
  return *m;
}
const LlamaModel& gpu_model() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(model_file(), cuda_backend());
  return *m;
}

TEST(CudaModel, ForwardLogitsAreTheCpus) {
  REQUIRE_GPU();
  const LlamaModel &c = cpu_model(), &g = gpu_model();
  const std::vector<int32_t> prompt =
      c.tokenizer().encode("The quick brown fox jumps over the lazy dog, and then it runs into the forest where", true);
  ContiguousKv kc(c.config().kv_shape(), 512), kg(g.config().kv_shape(), 512);
  Workspace wc, wg;
  Batch b;
  for (size_t t = 0; t < prompt.size(); ++t) b.add(prompt[t], int(t), 0, true);
  std::vector<float> lc, lg;
  for (int step = 0; step < 6; ++step) {
    c.forward(b, kc, wc, lc);
    g.forward(b, kg, wg, lg);
    ASSERT_EQ(lc.size(), lg.size());
    ASSERT_EQ(std::memcmp(lc.data(), lg.data(), lc.size() * sizeof(float)), 0) << "step " << step;
    // Next: the CPU's greedy token.
    const float* last = lc.data() + lc.size() - size_t(c.config().n_vocab);
    const int next = int(std::max_element(last, last + c.config().n_vocab) - last);
    const int pos = int(prompt.size()) + step;
    b = Batch{};
    b.add(next, pos, 0, true);
  }
}

std::vector<Request> bookstore_requests(int n, int max_tokens) {
  const ChatTemplate& t = cpu_model().chat();
  const char* questions[] = {"When do you open?", "Can teachers get a discount?", "Is there coffee?",
                             "What is on Saturday mornings?"};
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.prompt = t.apply(std::vector<ChatMessage>{{"system", "You are a bookstore's assistant. The store opens at nine "
                                                           "and closes at six; the cafe serves coffee until five."},
                                                {"user", questions[i % 4]}})
                   .encode(cpu_model().tokenizer(), false);
    r.max_tokens = max_tokens;
    r.logprobs = 2;
    reqs.push_back(r);
  }
  return reqs;
}

// The engine on the GPU keeps the KV there (attn/cuda_attention.h): every
// mode, alone or eight at once, gives each request the same tokens (the
// GPU's kernels compute a row apart from its batch and its sharing); against
// the CPU, whose attention rounds differently, a request's tokens part only
// at a near-tie (the CPU's top two within 0.5 nats), and most not at all.
TEST(CudaModel, TheEngineOnTheGpuIsExactAcrossModesAndBatches) {
  REQUIRE_GPU();
  const auto reqs = bookstore_requests(8, 24);
  Engine gpu_alone(gpu_model(), test::engine_options(AttnMode::kNone, 1, 0, size_t(64) << 20));
  EXPECT_STREQ(gpu_alone.kv_device(), "cuda");
  EXPECT_EQ(gpu_alone.kv_note(), "");
  const auto ref = test::run_each(gpu_alone, reqs);
  for (AttnMode mode : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kRelay, AttnMode::kNone}) {
    Engine e(gpu_model(), test::engine_options(mode, 8, 0, size_t(64) << 20));
    test::expect_same_tokens(test::run_all(e, reqs), ref, std::string("gpu, ") + attn_mode_name(mode));
  }
  Engine cpu(cpu_model(), test::engine_options(AttnMode::kNone, 1, 0, size_t(64) << 20));
  const auto on_cpu = test::run_each(cpu, reqs);
  int same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Completion &g = ref[i].completions[0], &c = on_cpu[i].completions[0];
    size_t k = 0;
    while (k < g.tokens.size() && k < c.tokens.size() && g.tokens[k] == c.tokens[k]) ++k;
    if (k == g.tokens.size() && k == c.tokens.size()) {
      ++same;
      continue;
    }
    ASSERT_LT(k, c.logprobs.size()) << "request " << i;
    const auto& top = c.logprobs[k].top;
    ASSERT_GE(top.size(), 2u);
    const float gap = top[0].logprob - top[1].logprob;
    std::printf("request %zu: the GPU parts from the CPU at token %zu, where the CPU's top two are %.3f nats apart\n",
                i, k, gap);
    EXPECT_LT(gap, 0.5f) << "request " << i << " token " << k;
  }
  EXPECT_GE(same, 6) << "of 8 requests, the same tokens on the GPU and the CPU";
}


// Perplexity with the KV on the GPU (model/sequence_kv.h) against the CPU's
// on the same text: within 0.5% (the bound), the GPU's rounding in
// attention its only difference.
TEST(CudaModel, PerplexityIsTheCpusWithinHalfAPercent) {
  REQUIRE_GPU();
  std::ifstream f(CS_PERPLEXITY_TEXT);
  std::stringstream text;
  text << f.rdbuf();
  const std::vector<int32_t> tokens = cpu_model().tokenizer().encode(text.str(), true);
  PerplexityOptions o;
  o.n_ctx = 128;
  o.max_windows = 8;
  // Each window's running perplexity, to show where the two part.
  std::vector<double> running[2];
  int side = 0;
  o.progress = [&](int, int, double ppl) { running[side].push_back(ppl); };
  const double c = perplexity(cpu_model(), tokens, o).ppl();
  side = 1;
  const double g = perplexity(gpu_model(), tokens, o).ppl();
  std::printf("perplexity: CPU %.4f, GPU %.4f (ratio %.5f); running, window by window:\n", c, g, g / c);
  for (size_t i = 0; i < running[0].size() && i < running[1].size(); ++i)
    std::printf("  %zu: CPU %.4f GPU %.4f (%.5f)\n", i + 1, running[0][i], running[1][i],
                running[1][i] / running[0][i]);
  EXPECT_NEAR(g / c, 1.0, 0.005);
}

}  // namespace
}  // namespace cs
