#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace cs {

int32_t argmax(std::span<const float> v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

namespace {

double log_sum_exp(std::span<const float> v) {
  const float m = *std::max_element(v.begin(), v.end());
  double s = 0;
  for (float x : v) s += std::exp(double(x) - m);
  return m + std::log(s);
}

}  // namespace

float token_logprob(std::span<const float> logits, int32_t token) {
  return float(double(logits[size_t(token)]) - log_sum_exp(logits));
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int k) {
  k = std::min(k, int(logits.size()));
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const double lse = log_sum_exp(logits);
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < k; ++i) out.emplace_back(ids[size_t(i)], float(double(logits[size_t(ids[size_t(i)])]) - lse));
  return out;
}

Sampler::Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, size_t prompt_len) {
  work_.assign(logits.begin(), logits.end());
  if ((p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && history.size() > prompt_len) {
    std::unordered_map<int32_t, int> count;
    for (int32_t id : history.subspan(prompt_len)) ++count[id];
    for (auto [id, c] : count)
      if (id >= 0 && size_t(id) < work_.size()) work_[size_t(id)] -= p_.presence_penalty + p_.frequency_penalty * float(c);
  }
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n = p_.repeat_last_n < 0 ? history.size()
                                          : std::min(history.size(), size_t(p_.repeat_last_n));
    std::unordered_set<int32_t> seen(history.end() - long(n), history.end());
    for (int32_t id : seen) {
      if (id < 0 || size_t(id) >= work_.size()) continue;
      float& l = work_[size_t(id)];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  if (p_.temperature <= 0.0f) return argmax(work_);

  cand_.clear();
  for (size_t i = 0; i < work_.size(); ++i) cand_.emplace_back(work_[i] / p_.temperature, int32_t(i));
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) keep = size_t(p_.top_k);
  std::partial_sort(cand_.begin(), cand_.begin() + long(keep), cand_.end(), by_logit);
  cand_.resize(keep);
  // Softmax over the kept candidates, then the smallest prefix reaching top_p.
  const float m = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) sum += (c.first = std::exp(c.first - m));
  if (p_.top_p < 1.0f) {
    double acc = 0;
    size_t k = 0;
    while (k < cand_.size()) {
      acc += cand_[k++].first / sum;
      if (acc >= p_.top_p) break;
    }
    cand_.resize(k);
    sum = 0;
    for (auto& c : cand_) sum += c.first;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (auto& c : cand_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace cs
