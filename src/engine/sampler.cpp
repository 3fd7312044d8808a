#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "base/log_sum_exp.h"
#include "model/ops.h"

namespace cs {

// The first index of the largest value, as std::max_element finds it, in
// two vectorised passes (the max, then where it first is): a scalar scan of
// a large vocabulary (Gemma's) was a visible share of a batch-32 decode step
// (docs/kernels.md).
int32_t argmax(std::span<const float> v) {
  if (v.empty()) return 0;
  float m = v[0];
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < v.size(); ++i) m = v[i] > m ? v[i] : m;
  const auto it = std::find(v.begin(), v.end(), m);
  return it == v.end() ? int32_t(std::max_element(v.begin(), v.end()) - v.begin()) : int32_t(it - v.begin());
}

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
  // Tokens a constraint forbids (-inf) have no probability to list.
  for (int i = 0; i < k && std::isfinite(logits[size_t(ids[size_t(i)])]); ++i)
    out.emplace_back(ids[size_t(i)], float(double(logits[size_t(ids[size_t(i)])]) - lse));
  return out;
}

Sampler::Sampler(SamplingParams p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, size_t prompt_len) {
  const bool presence = (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && history.size() > prompt_len;
  const bool repeat = p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0;
  // Greedy without penalties reads the logits as they are (no 1 MB copy per
  // sequence and step on a 262144-token vocabulary).
  if (!presence && !repeat && p_.temperature <= 0.0f) return argmax(logits);
  work_.assign(logits.begin(), logits.end());
  if (presence) {
    std::unordered_map<int32_t, int> count;
    for (int32_t id : history.subspan(prompt_len)) ++count[id];
    for (auto [id, c] : count)
      if (id >= 0 && size_t(id) < work_.size()) work_[size_t(id)] -= p_.presence_penalty + p_.frequency_penalty * float(c);
  }
  if (repeat) {
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

  // Candidates: every token, or the top_k by logit (ties: the lower id).
  const size_t n = work_.size();
  const float* l = work_.data();
  auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  ids_.resize(n);
  std::iota(ids_.begin(), ids_.end(), 0);
  size_t keep = n;
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    keep = size_t(p_.top_k);
    std::nth_element(ids_.begin(), ids_.begin() + long(keep) - 1, ids_.end(), better);
  }
  // Softmax weights at the temperature (vectorised over the whole vocabulary).
  float m = -INFINITY;
  for (size_t i = 0; i < keep; ++i) m = std::max(m, l[ids_[i]]);
  const float inv_t = 1.0f / p_.temperature;
  weight_.resize(n);
  double sum = 0;
  if (keep == n) {
    sum = exp_weights(l, n, m, inv_t, weight_.data());
  } else {
    for (size_t i = 0; i < keep; ++i) sum += (weight_[ids_[i]] = std::exp(std::max((l[ids_[i]] - m) * inv_t, -100.0f)));
  }
  // top_p: the fewest most likely tokens whose mass reaches it. Only a head
  // of the candidates is sorted, grown until it holds that mass (usually
  // the first few dozen), not the whole vocabulary.
  if (p_.top_p < 1.0f) {
    const double want = double(p_.top_p) * sum;
    double acc = 0;
    size_t k = 0, head = std::min(keep, size_t(64));
    for (bool reached = false; !reached;) {
      std::partial_sort(ids_.begin() + long(k), ids_.begin() + long(head), ids_.begin() + long(keep), better);
      while (k < head && !reached) reached = (acc += weight_[ids_[k++]]) >= want;
      if (head == keep) break;
      head = std::min(keep, head * 8);
    }
    keep = k;
    sum = acc;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i)
    if ((r -= weight_[ids_[i]]) <= 0) return ids_[i];
  return ids_[keep - 1];
}

}  // namespace cs
