// Elementwise and normalisation steps of the Llama forward pass, fp32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/arch.h"

namespace cs {

// out = x / rms(x) * w, over n values.
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);

// out[i] = silu(gate[i]) * up[i] for any finite gate (none overflows), to a
// relative error below (1 + |gate| / 10) * 1e-6 (attn/exp_impl.h's vector
// exp; the second term only for negative gates, whose output is then near
// 0). out may be gate or up. Large n is split over threads; no element's
// bits depend on that.
void swiglu(const float* gate, const float* up, size_t n, float* out);

// out[i] = gelu(gate[i]) * up[i], GELU's tanh approximation (Gemma's
// GeGLU, as llama.cpp's ggml_gelu), through the same vector exp as swiglu.
// out may be gate or up.
void geglu(const float* gate, const float* up, size_t n, float* out);

// out[i] = x sigmoid(1.702 x) (clamp(up[i], -7, 7) + 1) with x = min(gate[i], 7):
// gpt-oss's SwiGLU (llama.cpp's ggml_swiglu_oai), through the same vector
// exp as swiglu. out may be gate or up.
void swiglu_oai(const float* gate, const float* up, size_t n, float* out);

// x[i] = cap tanh(x[i] / cap), cap > 0: Gemma 2's soft-capped logits, to
// the vector exp's accuracy (an error near cap * 4e-7), ops_math.h's
// fp::softcap's bits.
void softcap(float* x, size_t n, float cap);

// w[i] = exp((x[i] - m) * scale) for x[i] <= m, scale >= 0 (softmax weights
// for sampling, to attn/exp_impl.h's accuracy); returns their sum (double).
double exp_weights(const float* x, size_t n, float m, float scale, float* w);

// A model's RoPE: the rotated dimensions of a head, the base, and its
// scaling. Linear scaling multiplies every angle by freq_scale; Llama 3's
// frequency factors (the rope_freqs tensor, rot_dim / 2 values) divide
// dimension pair i's angle by factors[i].
struct RopeParams {
  int rot_dim = 0;
  double base = 10000.0;
  double freq_scale = 1.0;
  std::vector<float> factors;  // empty: all 1
  RopeStyle style = RopeStyle::kAdjacent;
  // YaRN (rope.scaling.type yarn): pair i turns by a mix of its scaled angle
  // (times freq_scale) and its original one, the original's share
  // ext_factor * (1 - clamp((i - yarn_low) / (yarn_high - yarn_low), 0, 1)),
  // so fast pairs keep their angle and slow ones are interpolated; cos and
  // sin are multiplied by mscale (scores by its square). llama.cpp's rule.
  // mscale applies without YaRN too (rope.scaling.attn_factor: LongRoPE).
  bool yarn = false;
  double ext_factor = 0.0, yarn_low = 0.0, yarn_high = 0.0, mscale = 1.0;
  // The angle of pair i at position pos, and the factor cos and sin take.
  double angle(double pos, int i) const;
};

// RoPE angles for the given position ids: cos/sin of
// pos * freq_scale * base^(-2i/rot_dim) / factors[i], computed in double so
// any position id, however large, rotates exactly.
struct RopeTable {
  int half = 0;              // rot_dim / 2
  RopeStyle style = RopeStyle::kAdjacent;
  std::vector<float> cos_, sin_;  // [token][half]
  // A value no other build() gave (a device's copy of the angles knows when
  // it is stale).
  uint64_t generation = 0;
  void build(const int32_t* pos, int n_tok, const RopeParams& p);
  // Llama 4's attention temperature folded into the angles (a table for
  // the queries alone, every dimension rotated): each token's cos and sin
  // times 1 + scale * ln(1 + floor(pos / floor_len)).
  void temper(const int32_t* pos, double scale, int floor_len);
};

// That factor for position pos.
double attn_temperature(int32_t pos, double scale, int floor_len);

// Rotates each of n_heads heads of one token by the token's angles: pairs
// (x[2i], x[2i+1]) in the adjacent style, (x[i], x[i + rot_dim/2]) in the
// halves style; dimensions from rot_dim on are left as they are.
void rope(float* x, int n_heads, int head_dim, const RopeTable& table, int token);

// x[t * n + i] += b[i] for each of n_tok rows.
void add_bias(float* x, const float* b, int n, int n_tok);

}  // namespace cs
