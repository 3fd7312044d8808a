// Turns a row of logits into the next token: repetition penalty, OpenAI's
// presence and frequency penalties, then greedy (temperature 0) or
// temperature + top-k + top-p sampling from a seeded generator, so a given
// seed reproduces the same tokens. One per sequence.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace cs {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float repeat_penalty = 1.0f;  // 1 = off; CTRL-style: logit / p if > 0 else logit * p
  int repeat_last_n = 64;    // how many recent tokens the penalty looks at
  uint64_t seed = 0;
  // OpenAI's: logit -= presence * (count > 0) + frequency * count, over the
  // tokens generated so far (not the prompt).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(SamplingParams p);
  // Picks a token from `logits` given the tokens so far (for the penalties);
  // the first `prompt_len` of them are the prompt.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history, size_t prompt_len = 0);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<float> work_;    // logits after the penalties
  std::vector<int32_t> ids_;   // candidate token ids
  std::vector<float> weight_;  // softmax weight per token id
};

// The index of the largest value (the lowest index on ties).
int32_t argmax(std::span<const float> v);

// log softmax(logits)[token], computed in double.
float token_logprob(std::span<const float> logits, int32_t token);
// The k most likely tokens and their log probabilities, best first (the
// lowest id first on ties); fewer where fewer than k are possible (a
// constraint's mask leaves the rest at -inf).
std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int k);

}  // namespace cs
