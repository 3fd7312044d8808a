#include "model/reference.h"

#include <algorithm>
#include <cmath>

namespace cs {

namespace {

std::vector<float> dequantize(const Weight& w) {
  std::vector<float> out(size_t(w.rows) * size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    float* row = out.data() + size_t(r) * size_t(w.cols);
    dequantize_row(w.type, w.data + size_t(r) * w.row_bytes, row, size_t(w.cols));
  }
  return out;
}

// y[t][r] = sum_c W[r][c] x[t][c]; W is rows x cols.
void matmul(const std::vector<float>& w, int rows, int cols, const float* x, int n, float* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const float* wr = w.data() + size_t(r) * size_t(cols);
    for (int t = 0; t < n; ++t) {
      const float* xt = x + size_t(t) * size_t(cols);
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int c = 0; c < cols; ++c) s += wr[c] * xt[c];
      y[size_t(t) * size_t(rows) + size_t(r)] = s;
    }
  }
}

void rmsnorm(const float* x, const std::vector<float>& w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = float(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * w[size_t(i)];
}

void add(std::vector<float>& y, const std::vector<float>& b, int n) {
  if (b.empty()) return;
  for (int t = 0; t < n; ++t)
    for (size_t i = 0; i < b.size(); ++i) y[size_t(t) * b.size() + i] += b[i];
}

// Rotates each head for position pos: dimension pairs (2i, 2i+1) in the
// adjacent style, (i, i + rot_dim/2) in the halves style.
void rope(float* x, int heads, int head_dim, const RopeParams& r, int pos) {
  const int half = r.rot_dim / 2;
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < half; ++i) {
      // Pair i's wavelength in positions, and its angle at pos.
      double wavelength = 2 * M_PI / std::pow(r.base, -2.0 * i / r.rot_dim);
      if (!r.factors.empty()) wavelength *= r.factors[size_t(i)];
      double theta = 2 * M_PI * pos / wavelength * r.freq_scale;
      const double m = r.mscale;  // rope.scaling.attn_factor, with YaRN's own share
      if (r.yarn) {
        // YaRN: the original angle's share falls from ext_factor at pair
        // yarn_low to 0 at yarn_high, linearly.
        const double share = i <= r.yarn_low    ? 1.0
                             : i >= r.yarn_high ? 0.0
                                                : 1.0 - (i - r.yarn_low) / std::max(0.001, r.yarn_high - r.yarn_low);
        theta = theta * (1 - share * r.ext_factor) + 2 * M_PI * pos / wavelength * share * r.ext_factor;
      }
      const double c = std::cos(theta) * m, s = std::sin(theta) * m;
      float* head = x + size_t(h) * head_dim;
      float* v0 = r.style == RopeStyle::kAdjacent ? head + 2 * i : head + i;
      float* v1 = r.style == RopeStyle::kAdjacent ? v0 + 1 : v0 + half;
      const double a = *v0, b = *v1;
      *v0 = float(a * c - b * s);
      *v1 = float(a * s + b * c);
    }
}

// Gemma 3's norm of a block's output before its residual (none elsewhere).
void post_norm(std::vector<float>& y, const std::vector<float>& w, int n, int E, float eps) {
  if (w.empty()) return;
  for (int t = 0; t < n; ++t) rmsnorm(&y[size_t(t) * E], w, E, eps, &y[size_t(t) * E]);
}

// The gated unit: silu(g) u, GELU's tanh approximation (libm's tanhf) times
// u, or gpt-oss's: g and u clamped to 7 (u also to -7), silu with
// 1.702 in the sigmoid, times u + 1.
float glu(FfnAct act, float g, float u) {
  switch (act) {
    case FfnAct::kSilu: return g / (1.0f + expf(-g)) * u;
    case FfnAct::kGeluTanh: return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    case FfnAct::kSwigluOai: {
      const float x = std::min(g, 7.0f);
      return x / (1.0f + expf(-1.702f * x)) * (std::clamp(u, -7.0f, 7.0f) + 1.0f);
    }
  }
  return 0;
}

}  // namespace

ReferenceModel::ReferenceModel(const LlamaModel& model) : cfg_(model.config()) {
  tok_embd_ = dequantize(model.tok_embd());
  output_ = dequantize(model.output());
  output_norm_ = model.output_norm();
  for (const LlamaLayer& l : model.layers()) {
    layers_.push_back({l.attn_norm, l.ffn_norm, dequantize(l.wq), dequantize(l.wk), dequantize(l.wv), dequantize(l.wo),
                       dequantize(l.w_gate), dequantize(l.w_up), dequantize(l.w_down), l.bq, l.bk, l.bv, l.bo,
                       l.q_norm, l.k_norm, l.attn_post_norm, l.ffn_post_norm, {}, nullptr, nullptr, nullptr, &l});
    if (cfg_.moe()) {
      Layer& L = layers_.back();
      L.router = dequantize(l.router);
      L.exp_gate = &l.exp_gate, L.exp_up = &l.exp_up, L.exp_down = &l.exp_down;
    }
  }
}

// One token's mixture of experts: the router's logits (plus its bias,
// gpt-oss), the n_expert_used highest (a stable sort: ties go to the lower
// id), weighed by their softmax probabilities renormalized (kSoftmaxNorm)
// or by a softmax over the chosen logits alone (kSoftmaxChosen), both in
// double; the weighed sum of their FFNs (with their biases, gpt-oss), each
// dequantized for the purpose.
void ReferenceModel::moe(const Layer& L, const float* x, float* out) const {
  const LlamaConfig& c = cfg_;
  const LlamaLayer& src = *L.src;
  const int E = c.n_embd, F = c.n_ff_exp, n = c.n_expert, k = c.n_expert_used;
  std::vector<float> logit(static_cast<size_t>(n));
  matmul(L.router, n, E, x, 1, logit.data());
  for (size_t e = 0; e < src.router_b.size(); ++e) logit[e] += src.router_b[e];
  std::vector<int> order(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) order[size_t(e)] = e;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logit[size_t(a)] > logit[size_t(b)]; });
  // Softmax over all n (kSoftmaxNorm) or the chosen k; either way each
  // chosen expert's weight is its exp over the chosen ones' sum.
  const double mx = logit[size_t(order[0])];
  double chosen = 0;
  for (int j = 0; j < k; ++j) chosen += std::exp(double(logit[size_t(order[size_t(j)])]) - mx);
  if (c.gating == MoeGating::kSoftmaxNorm) {
    // llama.cpp floors the chosen probabilities' sum at 2^-14.
    double z = 0;
    for (int e = 0; e < n; ++e) z += std::exp(double(logit[size_t(e)]) - mx);
    chosen = std::max(chosen / z, 6.103515625e-5) * z;
  }
  std::fill_n(out, E, 0.0f);
  std::vector<float> gate(static_cast<size_t>(F)), up(gate.size()), y(static_cast<size_t>(E));
  auto bias = [](const std::vector<float>& b, int e, int w, std::vector<float>& v) {
    if (!b.empty())
      for (int i = 0; i < w; ++i) v[size_t(i)] += b[size_t(e) * size_t(w) + size_t(i)];
  };
  for (int j = 0; j < k; ++j) {
    const int e = order[size_t(j)];
    const float w = float(std::exp(double(logit[size_t(e)]) - mx) / chosen);
    matmul(dequantize((*L.exp_gate)[size_t(e)]), F, E, x, 1, gate.data());
    matmul(dequantize((*L.exp_up)[size_t(e)]), F, E, x, 1, up.data());
    bias(src.exp_gate_b, e, F, gate);
    bias(src.exp_up_b, e, F, up);
    for (int i = 0; i < F; ++i) gate[size_t(i)] = glu(c.act, gate[size_t(i)], up[size_t(i)]);
    matmul(dequantize((*L.exp_down)[size_t(e)]), E, F, gate.data(), 1, y.data());
    bias(src.exp_down_b, e, E, y);
    for (int i = 0; i < E; ++i) out[i] += w * y[size_t(i)];
  }
}

void ReferenceModel::forward(std::span<const int32_t> tokens, std::vector<float>& logits) const {
  const LlamaConfig& c = cfg_;
  const int n = int(tokens.size()), E = c.n_embd, F = c.n_ff, D = c.head_dim;
  const int QW = c.q_width(), KW = c.kv_width(), group = c.n_heads / c.n_kv_heads;
  std::vector<float> x(size_t(n) * E), xb(x.size()), o(x.size()), q(size_t(n) * QW), att(q.size());
  std::vector<float> k(size_t(n) * KW), v(k.size()), gate(size_t(n) * F), up(gate.size());
  for (int t = 0; t < n; ++t) {
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= c.n_vocab)
      throw Error("token id " + std::to_string(tokens[size_t(t)]) + " is out of range");
    std::copy_n(tok_embd_.data() + size_t(tokens[size_t(t)]) * E, E, x.data() + size_t(t) * E);
  }
  for (float& e : x) e *= c.embd_scale;
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[size_t(l)];
    const int window = c.window_of(l);
    const RopeParams& rp = window ? c.rope_swa : c.rope;
    const bool nope = c.no_rope_every > 0 && (l + 1) % c.no_rope_every == 0;  // SmolLM3's 4th, 8th, ... layers
    // OLMo 2 has no norm before its blocks: they read the residual itself.
    if (L.attn_norm.empty()) xb = x;
    else
      for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], L.attn_norm, E, c.rms_eps, &xb[size_t(t) * E]);
    matmul(L.wq, QW, E, xb.data(), n, q.data());
    matmul(L.wk, KW, E, xb.data(), n, k.data());
    matmul(L.wv, KW, E, xb.data(), n, v.data());
    add(q, L.bq, n);
    add(k, L.bk, n);
    add(v, L.bv, n);
    for (int t = 0; t < n; ++t) {
      if (!L.q_norm.empty()) {
        // Per head (Qwen 3, Gemma 3), or over the whole projection (OLMo 2).
        const int qn = int(L.q_norm.size()), kn = int(L.k_norm.size());
        for (int h = 0; h < QW / qn; ++h) rmsnorm(&q[size_t(t) * QW + size_t(h) * qn], L.q_norm, qn, c.rms_eps, &q[size_t(t) * QW + size_t(h) * qn]);
        for (int h = 0; h < KW / kn; ++h) rmsnorm(&k[size_t(t) * KW + size_t(h) * kn], L.k_norm, kn, c.rms_eps, &k[size_t(t) * KW + size_t(h) * kn]);
      }
      if (!nope) {
        rope(&q[size_t(t) * QW], c.n_heads, D, rp, t);
        rope(&k[size_t(t) * KW], c.n_kv_heads, D, rp, t);
      }
      if (c.attn_temp_scale != 0.0f) {  // Llama 4's temperature, by the query's position
        const double temp = 1.0 + c.attn_temp_scale * std::log(std::floor(double(t) / c.attn_temp_floor) + 1.0);
        for (int i = 0; i < QW; ++i) q[size_t(t) * QW + size_t(i)] = float(q[size_t(t) * QW + size_t(i)] * temp);
      }
    }
    // Causal attention, one (token, head) at a time; a sliding layer sees
    // the last `window` positions.
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < n; ++t) {
      std::vector<double> p(size_t(t) + 1);
      const int j0 = window ? std::max(0, t - window + 1) : 0;
      for (int h = 0; h < c.n_heads; ++h) {
        const float* qh = &q[size_t(t) * QW + size_t(h) * D];
        const int kvh = h / group;
        // A sink (gpt-oss) is one more logit in the softmax, with no value.
        const double sink = L.src->sinks.empty() ? -INFINITY : double(L.src->sinks[size_t(h)]);
        double mx = sink;
        for (int j = j0; j <= t; ++j) {
          const float* kj = &k[size_t(j) * KW + size_t(kvh) * D];
          double s = 0;
          for (int d = 0; d < D; ++d) s += double(qh[d]) * kj[d];
          p[size_t(j)] = s * double(c.q_scale) / std::sqrt(double(D));
          if (c.attn_softcap != 0.0f) p[size_t(j)] = c.attn_softcap * std::tanh(p[size_t(j)] / c.attn_softcap);
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = sink == -INFINITY ? 0.0 : std::exp(sink - mx);
        for (int j = j0; j <= t; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        float* out = &att[size_t(t) * QW + size_t(h) * D];
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = j0; j <= t; ++j) acc += p[size_t(j)] * v[size_t(j) * KW + size_t(kvh) * D + d];
          out[d] = float(acc / sum);
        }
      }
    }
    matmul(L.wo, E, QW, att.data(), n, o.data());
    add(o, L.bo, n);
    post_norm(o, L.attn_post_norm, n, E, c.rms_eps);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i] * c.residual_scale;  // Granite's residual_scale (else 1)
    if (L.ffn_norm.empty()) xb = x;
    else
      for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], L.ffn_norm, E, c.rms_eps, &xb[size_t(t) * E]);
    if (c.moe()) {
      for (int t = 0; t < n; ++t) moe(L, &xb[size_t(t) * E], &o[size_t(t) * E]);
    } else {
      matmul(L.w_gate, F, E, xb.data(), n, gate.data());
      matmul(L.w_up, F, E, xb.data(), n, up.data());
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = glu(c.act, gate[i], up[i]);
      matmul(L.w_down, E, F, gate.data(), n, o.data());
    }
    post_norm(o, L.ffn_post_norm, n, E, c.rms_eps);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i] * c.residual_scale;
  }
  for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], output_norm_, E, c.rms_eps, &xb[size_t(t) * E]);
  logits.resize(size_t(n) * c.n_vocab);
  matmul(output_, c.n_vocab, E, xb.data(), n, logits.data());
  for (float& l : logits) l *= c.logit_mul;  // Granite's 1 / logit_scale (else 1)
  if (c.final_softcap != 0.0f)  // Gemma 2's
    for (float& l : logits) l = float(c.final_softcap * std::tanh(double(l) / c.final_softcap));
}

}  // namespace cs
