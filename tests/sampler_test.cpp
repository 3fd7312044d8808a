#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <map>

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

}  // namespace
}  // namespace cs
