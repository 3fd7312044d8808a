// log(sum(exp(v))) over a row of logits, accumulated in double from the
// row's maximum (so no term overflows): the perplexity's and the sampler's
// log-probabilities share it, so both say the same of a token.
#pragma once
#include <algorithm>
#include <cmath>
#include <span>

namespace cs {

inline double log_sum_exp(std::span<const float> v) {
  const float m = *std::max_element(v.begin(), v.end());
  double s = 0;
  for (float x : v) s += std::exp(double(x) - m);
  return m + std::log(s);
}

}  // namespace cs
