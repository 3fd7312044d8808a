#include "model/ops.h"

#include <cmath>

namespace cs {

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  // Sum in double: the residual stream of small Llamas has outliers in the
  // tens of thousands, and the norm feeds every later rounding decision.
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int i = 0; i < n; ++i) ss += double(x[i] * x[i]);
  const float mean = float(ss / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
#pragma omp simd
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void swiglu(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void RopeTable::build(const int32_t* pos, int n_tok, int rot_dim, double freq_base) {
  half = rot_dim / 2;
  cos_.resize(size_t(n_tok) * half);
  sin_.resize(size_t(n_tok) * half);
  for (int t = 0; t < n_tok; ++t)
    for (int i = 0; i < half; ++i) {
      const double theta = double(pos[t]) * std::pow(freq_base, -2.0 * i / rot_dim);
      cos_[size_t(t) * half + i] = float(std::cos(theta));
      sin_[size_t(t) * half + i] = float(std::sin(theta));
    }
}

void rope(float* x, int n_heads, int head_dim, const RopeTable& table, int token) {
  const float* c = table.cos_.data() + size_t(token) * table.half;
  const float* s = table.sin_.data() + size_t(token) * table.half;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + size_t(h) * head_dim;
    for (int i = 0; i < table.half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c[i] - b * s[i];
      v[2 * i + 1] = a * s[i] + b * c[i];
    }
  }
}

}  // namespace cs
