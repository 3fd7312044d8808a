// Partial attention states and the one merge every split kernel uses
// (ChunkAttention's attn_reduce, Eq. 2; RelayAttention's fusion, Eq. 7/11).
// A state is (o, m, l): o = sum_t exp(s_t - m) v_t (unnormalised), m the
// largest score seen, l = sum_t exp(s_t - m). The log-sum-exp form
// (o / l, lse = m + log l) is the same state with l = 1 and m = lse.
#pragma once
#include <cmath>

namespace cs {

struct StateRef {
  float* o;  // d floats
  float* m;
  float* l;
};

// Folds b into a: a <- a (+) b. Either may be empty (m = -inf).
void merge(StateRef a, const float* o_b, float m_b, float l_b, int d);

// Final output row: o / l (zeros for an empty state). An attention sink
// (gpt-oss: a learned logit per head that takes part in the softmax but has
// no value) adds exp(sink - m) to the denominator, which is exact however
// the keys were split and merged; -inf: none.
void finalize(const float* o, float m, float l, int d, float* out, float sink = -INFINITY);

// Log-sum-exp form <-> (o, m, l).
float lse_of(float m, float l);
inline void state_from_lse(float lse, float* m, float* l) {
  *m = lse;
  *l = 1.0f;
}

}  // namespace cs
