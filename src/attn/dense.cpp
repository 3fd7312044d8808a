#include "attn/dense.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cs {

void attend_one(const float* q, const DenseKv& kv, int d, float* out) {
  thread_local std::vector<float> score;
  score.resize(size_t(kv.n));
  const float scale = 1.0f / std::sqrt(float(d));
  float m = -INFINITY;
  for (int t = 0; t < kv.n; ++t) {
    const float* k = kv.k + size_t(t) * kv.stride;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < d; ++i) s += q[i] * k[i];
    score[t] = s * scale;
    m = std::max(m, score[t]);
  }
  float sum = 0;
  for (int t = 0; t < kv.n; ++t) sum += (score[t] = std::exp(score[t] - m));
  const float inv = 1.0f / sum;
  std::fill(out, out + d, 0.0f);
  for (int t = 0; t < kv.n; ++t) {
    const float* v = kv.v + size_t(t) * kv.stride;
    const float p = score[t] * inv;
#pragma omp simd
    for (int i = 0; i < d; ++i) out[i] += p * v[i];
  }
}

}  // namespace cs
