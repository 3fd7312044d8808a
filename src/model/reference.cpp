#include "model/reference.h"

#include <algorithm>
#include <cmath>

namespace cs {

namespace {

std::vector<float> dequantize(const Weight& w) {
  std::vector<float> out(size_t(w.rows) * size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    float* row = out.data() + size_t(r) * size_t(w.cols);
    if (!w.owned.empty())
      std::copy_n(w.owned.data() + size_t(r) * size_t(w.cols), size_t(w.cols), row);
    else
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

// Rotates adjacent pairs of each head (the GGUF llama layout) for position pos.
void rope(float* x, int heads, int head_dim, int rot_dim, double base, int pos) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < rot_dim / 2; ++i) {
      const double theta = pos * std::pow(base, -2.0 * i / rot_dim);
      const double c = std::cos(theta), s = std::sin(theta);
      float* v = x + size_t(h) * head_dim + 2 * i;
      const double a = v[0], b = v[1];
      v[0] = float(a * c - b * s);
      v[1] = float(a * s + b * c);
    }
}

}  // namespace

ReferenceModel::ReferenceModel(const LlamaModel& model) : cfg_(model.config()) {
  tok_embd_ = dequantize(model.tok_embd());
  output_ = dequantize(model.output());
  output_norm_ = model.output_norm();
  for (const LlamaLayer& l : model.layers())
    layers_.push_back({l.attn_norm, l.ffn_norm, dequantize(l.wq), dequantize(l.wk), dequantize(l.wv), dequantize(l.wo),
                       dequantize(l.w_gate), dequantize(l.w_up), dequantize(l.w_down)});
}

void ReferenceModel::forward(std::span<const int32_t> tokens, std::vector<float>& logits) const {
  const LlamaConfig& c = cfg_;
  const int n = int(tokens.size()), E = c.n_embd, F = c.n_ff, D = c.head_dim;
  const int KW = c.n_kv_heads * D, group = c.n_heads / c.n_kv_heads;
  std::vector<float> x(size_t(n) * E), xb(x.size()), q(x.size()), att(x.size()), o(x.size());
  std::vector<float> k(size_t(n) * KW), v(k.size()), gate(size_t(n) * F), up(gate.size());
  for (int t = 0; t < n; ++t) {
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= c.n_vocab)
      throw Error("token id " + std::to_string(tokens[size_t(t)]) + " is out of range");
    std::copy_n(tok_embd_.data() + size_t(tokens[size_t(t)]) * E, E, x.data() + size_t(t) * E);
  }
  for (const Layer& L : layers_) {
    for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], L.attn_norm, E, c.rms_eps, &xb[size_t(t) * E]);
    matmul(L.wq, E, E, xb.data(), n, q.data());
    matmul(L.wk, KW, E, xb.data(), n, k.data());
    matmul(L.wv, KW, E, xb.data(), n, v.data());
    for (int t = 0; t < n; ++t) {
      rope(&q[size_t(t) * E], c.n_heads, D, c.rot_dim, c.rope_base, t);
      rope(&k[size_t(t) * KW], c.n_kv_heads, D, c.rot_dim, c.rope_base, t);
    }
    // Causal attention, one (token, head) at a time.
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < n; ++t) {
      std::vector<double> p(size_t(t) + 1);
      for (int h = 0; h < c.n_heads; ++h) {
        const float* qh = &q[size_t(t) * E + size_t(h) * D];
        const int kvh = h / group;
        double mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          const float* kj = &k[size_t(j) * KW + size_t(kvh) * D];
          double s = 0;
          for (int d = 0; d < D; ++d) s += double(qh[d]) * kj[d];
          p[size_t(j)] = s / std::sqrt(double(D));
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        float* out = &att[size_t(t) * E + size_t(h) * D];
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j <= t; ++j) acc += p[size_t(j)] * v[size_t(j) * KW + size_t(kvh) * D + d];
          out[d] = float(acc / sum);
        }
      }
    }
    matmul(L.wo, E, E, att.data(), n, o.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], L.ffn_norm, E, c.rms_eps, &xb[size_t(t) * E]);
    matmul(L.w_gate, F, E, xb.data(), n, gate.data());
    matmul(L.w_up, F, E, xb.data(), n, up.data());
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
    matmul(L.w_down, E, F, gate.data(), n, o.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  }
  for (int t = 0; t < n; ++t) rmsnorm(&x[size_t(t) * E], output_norm_, E, c.rms_eps, &xb[size_t(t) * E]);
  logits.resize(size_t(n) * c.n_vocab);
  matmul(output_, c.n_vocab, E, xb.data(), n, logits.data());
}

}  // namespace cs
