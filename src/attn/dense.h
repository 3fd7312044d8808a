// Attention of one query row over K/V stored densely (one row per token),
// fp32, with a numerically safe softmax. The path of the contiguous cache.
#pragma once
#include <cstddef>

namespace cs {

struct DenseKv {
  const float* k;  // row t at k + t * stride
  const float* v;
  size_t stride;   // floats between consecutive tokens
  int n;           // tokens
};

// out[0..d) = softmax(q . K^T / sqrt(d)) V over the n tokens.
void attend_one(const float* q, const DenseKv& kv, int d, float* out);

}  // namespace cs
