// Perplexity: llama-perplexity's windows, NLL and KL by hand, a model whose
// perplexity is known exactly (every logit 0: the vocabulary size), and the
// float reference against the fast path on a tiny model with fp32 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "model/perplexity.h"
#include "tiny_model.h"

namespace cs {
namespace {

std::vector<int32_t> iota(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = i + 3;
  return v;
}

TEST(Perplexity, WindowsAreLlamaPerplexitys) {
  const auto t = iota(20);  // 2 whole windows of 8; the last 4 tokens unused
  const auto w = perplexity_windows(t, 8, 0, 1);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], (std::vector<int32_t>{1, 4, 5, 6, 7, 8, 9, 10}));  // first token replaced by BOS
  EXPECT_EQ(w[1], (std::vector<int32_t>{1, 12, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(perplexity_windows(t, 8, 1, -1), (std::vector<std::vector<int32_t>>{{3, 4, 5, 6, 7, 8, 9, 10}}));
  try {
    perplexity_windows(iota(15), 8, 0, 1);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the text has 15 tokens; a context of 8 needs at least 16");
  }
}

TEST(Perplexity, NllAndKlByHand) {
  const std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  EXPECT_NEAR(token_nll(l, 0), std::log(4.0), 1e-6);
  EXPECT_NEAR(token_nll(l, 1), std::log(4.0 / 3.0), 1e-6);
  const std::vector<float> u = {5.0f, 5.0f};  // q = 1/2, 1/2
  EXPECT_NEAR(kl_divergence(l, u), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_EQ(kl_divergence(l, l), 0.0);
}

// Every logit 0: each token has probability 1 / V, so PPL = V exactly and
// its error is 0; the scored count follows llama-perplexity's rule.
TEST(Perplexity, AUniformModelHasTheVocabularySize) {
  test::TinyModelShape shape;
  shape.output_scale = 0;
  const auto model = LlamaModel::load(test::tiny_model("tiny_uniform", shape));
  PerplexityOptions o;
  o.n_ctx = 16;
  const PerplexityResult r = perplexity(*model, iota(50), o);
  EXPECT_EQ(r.windows, 3);
  EXPECT_EQ(r.count, 3 * (16 - 8 - 1));
  EXPECT_NEAR(r.ppl(), double(model->config().n_vocab), 1e-9 * model->config().n_vocab);
  EXPECT_LT(r.ppl_error(), 1e-6 * r.ppl());  // 0 up to the rounding of mean(x^2) - mean(x)^2
}

// On fp32 weights the fast path quantizes only its matmul inputs to int8:
// the reference agrees up to that noise, and the KL base file has
// llama-perplexity's layout.
TEST(Perplexity, ReferenceAgreesWithTheFastPath) {
  const auto model = LlamaModel::load(test::tiny_model());
  const ReferenceModel ref(*model);
  PerplexityOptions o;
  o.n_ctx = 32;
  o.kl_against = &ref;
  std::ostringstream base;
  o.kl_base = &base;
  const auto tokens = iota(64);
  const PerplexityResult r = perplexity(*model, tokens, o);
  ASSERT_EQ(r.kl.size(), size_t(r.count));
  EXPECT_EQ(r.count, 2 * 15);
  EXPECT_NEAR(r.ppl(), r.ref_ppl(), 0.02 * r.ref_ppl());
  double kl_max = 0;
  for (double k : r.kl) kl_max = std::max(kl_max, k);
  EXPECT_LT(kl_max, 1e-3);
  EXPECT_LE(r.top1_differ, 1);
  const int V = model->config().n_vocab;
  const size_t nv = size_t(2 * ((V + 1) / 2) + 4);
  EXPECT_EQ(base.str().size(), 8 + 12 + 64 * 4 + size_t(r.count) * nv * 2);
  EXPECT_EQ(base.str().substr(0, 8), "_logits_");
  // Scoring the reference itself gives its PPL.
  PerplexityOptions so;
  so.n_ctx = 32;
  so.score_with = &ref;
  EXPECT_NEAR(perplexity(*model, tokens, so).ppl(), r.ref_ppl(), 1e-9 * r.ref_ppl());
}

}  // namespace
}  // namespace cs
