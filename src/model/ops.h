// Elementwise and normalisation steps of the Llama forward pass, fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cs {

// out = x / rms(x) * w, over n values.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);

// out[i] = silu(gate[i]) * up[i] for any finite gate (none overflows), to a
// relative error below (1 + |gate| / 10) * 1e-6 (attn/exp_impl.h's vector
// exp; the second term only for negative gates, whose output is then near
// 0). out may be gate or up. Large n is split over threads; no element's
// bits depend on that.
void swiglu(const float* gate, const float* up, size_t n, float* out);

// w[i] = exp((x[i] - m) * scale) for x[i] <= m, scale >= 0 (softmax weights
// for sampling, to attn/exp_impl.h's accuracy); returns their sum (double).
double exp_weights(const float* x, size_t n, float m, float scale, float* w);

// RoPE angles for the given position ids: cos/sin of pos * base^(-2i/rot_dim),
// computed in double so any position id, however large, rotates exactly.
struct RopeTable {
  int half = 0;              // rot_dim / 2
  std::vector<float> cos_, sin_;  // [token][half]
  void build(const int32_t* pos, int n_tok, int rot_dim, double freq_base);
};

// Rotates adjacent pairs (x[2i], x[2i+1]) of each of n_heads heads of one
// token (the GGUF llama layout) by the token's angles.
void rope(float* x, int n_heads, int head_dim, const RopeTable& table, int token);

}  // namespace cs
