#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace cs {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.9f, -1.0f, 0.5f};

TEST(Sampler, GreedyIsArgmax) {
  Sampler s({});
  EXPECT_EQ(s.sample(kLogits, {}), 1);
  EXPECT_EQ(argmax(std::vector<float>{2, 5, 5}), 1);  // first of ties
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<int32_t> hist = {1};
  EXPECT_EQ(s.sample(kLogits, hist), 2);  // 3.0 / 1.5 = 2.0 < 2.9
  p.repeat_last_n = 1;
  Sampler s2(p);
  const std::vector<int32_t> old = {1, 4};  // token 1 is outside the window
  EXPECT_EQ(s2.sample(kLogits, old), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  Sampler a(p);
  p.top_k = 0;
  p.top_p = 0.01f;
  Sampler b(p);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a.sample(kLogits, {}), 1);
    EXPECT_EQ(b.sample(kLogits, {}), 1);
  }
}

TEST(Sampler, SeedReproducesAndTopKLimits) {
  SamplingParams p;
  p.temperature = 2.0f;
  p.top_k = 3;
  p.seed = 42;
  Sampler a(p), b(p);
  std::map<int, int> seen;
  for (int i = 0; i < 500; ++i) {
    const int32_t x = a.sample(kLogits, {});
    EXPECT_EQ(x, b.sample(kLogits, {}));
    ++seen[x];
  }
  EXPECT_EQ(seen.size(), 3u);  // only the top 3: ids 1, 2, 0
  EXPECT_EQ(seen.count(3), 0u);
  EXPECT_EQ(seen.count(4), 0u);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  const std::vector<float> l = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l, {}) == 1;
  EXPECT_NEAR(double(ones) / n, 0.75, 0.02);
}

// Top-k and top-p on a vocabulary of 3000 random logits, against a reference
// that sorts everything: every sample lies in the reference's nucleus, and
// the frequencies of its members follow their renormalised probabilities.
TEST(Sampler, TopKAndTopPMatchAFullSortReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(3000);
  for (auto& x : logits) x = nd(rng);
  logits[17] = logits[18];  // a tie
  struct Case {
    int top_k;
    float top_p, temp;
  };
  for (const Case c : {Case{0, 0.5f, 0.8f}, Case{0, 0.95f, 1.3f}, Case{5, 0.9f, 1.0f}, Case{40, 1.0f, 0.7f}}) {
    SCOPED_TRACE("top_k " + std::to_string(c.top_k) + " top_p " + std::to_string(c.top_p));
    // Reference: sort by logit (ties: lower id), cut to top_k, softmax, cut to top_p.
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    if (c.top_k > 0) order.resize(size_t(c.top_k));
    std::vector<double> w;
    double z = 0;
    for (int id : order) z += w.emplace_back(std::exp((double(logits[size_t(id)]) - logits[size_t(order[0])]) / c.temp));
    size_t k = 0;
    for (double acc = 0; k < order.size() && (acc += w[k] / z) < c.top_p;) ++k;
    k = std::min(order.size(), k + 1);
    double zk = 0;
    for (size_t i = 0; i < k; ++i) zk += w[i];
    SamplingParams p;
    p.temperature = c.temp, p.top_k = c.top_k, p.top_p = c.top_p, p.seed = 11;
    Sampler s(p);
    std::map<int, int> seen;
    const int draws = 12000;
    for (int i = 0; i < draws; ++i) ++seen[s.sample(logits, {})];
    for (auto [id, cnt] : seen)
      EXPECT_NE(std::find(order.begin(), order.begin() + long(k), id), order.begin() + long(k)) << "token " << id << " outside the nucleus";
    for (size_t i = 0; i < std::min<size_t>(k, 5); ++i)
      EXPECT_NEAR(double(seen[order[i]]) / draws, w[i] / zk, 0.02) << "token " << order[i];
  }
}

// OpenAI's penalties count generated tokens only: logit - presence - frequency * count.
TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokens) {
  SamplingParams p;
  p.presence_penalty = 0.05f;
  p.frequency_penalty = 0.04f;
  Sampler s(p);
  // Prompt {1, 1, 1}, generated {2}: only token 2 is penalised, 2.9 - 0.09 < 3.0.
  const std::vector<int32_t> hist = {1, 1, 1, 2};
  EXPECT_EQ(s.sample(kLogits, hist, 3), 1);
  // Generated {1, 1}: 3.0 - 0.05 - 0.08 = 2.87 < 2.9.
  const std::vector<int32_t> twice = {4, 1, 1};
  EXPECT_EQ(s.sample(kLogits, twice, 1), 2);
  // One 1 generated: 3.0 - 0.09 = 2.91 > 2.9.
  const std::vector<int32_t> once = {4, 1};
  EXPECT_EQ(s.sample(kLogits, once, 1), 1);
  // A negative penalty promotes: 2.9 + 0.2 > 3.0.
  p.presence_penalty = -0.2f;
  p.frequency_penalty = 0.0f;
  Sampler n(p);
  const std::vector<int32_t> gen2 = {2};
  EXPECT_EQ(n.sample(kLogits, gen2, 0), 2);
}

// The top k best first, the lowest id first on ties; tokens a constraint
// masked (-inf) are not listed, so fewer than k come back where fewer are
// possible (they had been listed with a null logprob and no text).
TEST(Sampler, TopLogprobsListOnlyPossibleTokens) {
  const std::vector<float> logits = {-INFINITY, 1.0f, -INFINITY, 1.0f, 0.0f};
  const double lse = std::log(2 * std::exp(1.0) + 1.0);
  const auto top = top_logprobs(logits, 4);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 4);
  EXPECT_FLOAT_EQ(top[0].second, float(1.0 - lse));
  EXPECT_FLOAT_EQ(top[2].second, float(-lse));
  EXPECT_EQ(top_logprobs(logits, 2).size(), 2u);
  EXPECT_TRUE(top_logprobs(logits, 0).empty());
}

}  // namespace
}  // namespace cs
