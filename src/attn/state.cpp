#include "attn/state.h"

#include <cmath>

namespace cs {

void merge(StateRef a, const float* o_b, float m_b, float l_b, int d) {
  if (m_b == -INFINITY) return;
  if (*a.m == -INFINITY) {
    for (int i = 0; i < d; ++i) a.o[i] = o_b[i];
    *a.m = m_b;
    *a.l = l_b;
    return;
  }
  const float m = std::fmax(*a.m, m_b);
  const float wa = std::exp(*a.m - m), wb = std::exp(m_b - m);
  for (int i = 0; i < d; ++i) a.o[i] = a.o[i] * wa + o_b[i] * wb;
  *a.l = *a.l * wa + l_b * wb;
  *a.m = m;
}

void finalize(const float* o, float m, float l, int d, float* out, float sink) {
  // With no key seen (m = -inf) a sink's term is inf: the row is 0.
  if (sink != -INFINITY) l += std::exp(sink - m);
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  for (int i = 0; i < d; ++i) out[i] = o[i] * inv;
}

float lse_of(float m, float l) { return m + std::log(l); }

}  // namespace cs
