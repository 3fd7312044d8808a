#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace cs {
namespace {

// The per-token steps (norms, rope, residuals) run between parallel matmuls:
// in a prefill they are split over the threads too, or one core idles. Each
// token is computed alone, so no bit depends on the split.
template <class Step>
void per_token(int n, Step&& step) {
#pragma omp parallel for schedule(static) if (n >= 32)
  for (int t = 0; t < n; ++t) step(size_t(t));
}

}  // namespace

void LlamaModel::embed(int32_t token, float* out) const {
  dequantize_row(tok_embd_.type, tok_embd_.data + size_t(token) * tok_embd_.row_bytes, out,
                 size_t(cfg_.n_embd));
  if (cfg_.embd_scale != 1.0f)
    for (int i = 0; i < cfg_.n_embd; ++i) out[i] *= cfg_.embd_scale;
}

// Q, K and V of the batch from the normed input ws.xb, ready to store and
// attend: projected, biased (where the file has biases), normed per head
// (where it has Q/K norms), rotated with `rope`'s angles, and the queries
// scaled where the model's attention scale is not 1/sqrt(head_dim).
void LlamaModel::attention_inputs(const LlamaLayer& L, int n, const RopeTable& rope, Workspace& ws) const {
  const LlamaConfig& c = cfg_;
  const int QW = c.q_width(), KW = c.kv_width(), D = c.head_dim;
  float *q = ws.q.data(), *k = ws.k.data(), *v = ws.v.data();
  const Weight* qkv[] = {&L.wq, &L.wk, &L.wv};
  float* qkv_out[] = {q, k, v};
  matmul_multi(qkv, ws.xb.data(), n, qkv_out, ws.qx);
  if (!L.bq.empty()) add_bias(q, L.bq.data(), QW, n);
  if (!L.bk.empty()) add_bias(k, L.bk.data(), KW, n);
  if (!L.bv.empty()) add_bias(v, L.bv.data(), KW, n);
  per_token(n, [&](size_t t) {
    float *qt = q + t * QW, *kt = k + t * KW;
    if (!L.q_norm.empty()) {
      for (int h = 0; h < c.n_heads; ++h) rmsnorm(qt + h * D, L.q_norm.data(), D, c.rms_eps, qt + h * D);
      for (int h = 0; h < c.n_kv_heads; ++h) rmsnorm(kt + h * D, L.k_norm.data(), D, c.rms_eps, kt + h * D);
    }
    cs::rope(qt, c.n_heads, D, rope, int(t));
    cs::rope(kt, c.n_kv_heads, D, rope, int(t));
    if (c.q_scale != 1.0f)
      for (int i = 0; i < QW; ++i) qt[i] *= c.q_scale;
  });
}

// The forward pass, read top to bottom as in llama2.c: embedding, then per
// layer (rmsnorm, q/k/v, rope, attention through the KV store, output
// projection, [post-norm], residual, rmsnorm, SwiGLU or GeGLU, [post-norm],
// residual), final norm, logits. Sliding-window layers (Gemma 3) attend to
// their window with their own RoPE angles.
void LlamaModel::forward(const Batch& batch, KvStore& kv, Workspace& ws,
                         std::vector<float>& logits) const {
  const LlamaConfig& c = cfg_;
  const int n = batch.size();
  const int E = c.n_embd, F = c.n_ff, QW = c.q_width(), KW = c.kv_width();
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= c.n_vocab) throw Error("token id " + std::to_string(t) + " is out of range");
  kv.begin_batch(batch);

  ws.x.resize(size_t(n) * E);
  ws.xb.resize(size_t(n) * E);
  ws.q.resize(size_t(n) * QW);
  ws.att.resize(size_t(n) * QW);
  ws.k.resize(size_t(n) * KW);
  ws.v.resize(size_t(n) * KW);
  ws.hb.resize(size_t(n) * F);
  ws.hb2.resize(size_t(n) * F);
  float *x = ws.x.data(), *xb = ws.xb.data(), *att = ws.att.data(), *hb = ws.hb.data(), *hb2 = ws.hb2.data();
  ws.rope.build(batch.pos.data(), n, c.rope);
  if (c.any_window()) ws.rope_swa.build(batch.pos.data(), n, c.rope_swa);

  auto residual = [&](size_t t) {
    for (int i = 0; i < E; ++i) x[t * E + size_t(i)] += xb[t * E + size_t(i)];
  };

  for (int t = 0; t < n; ++t) embed(batch.tokens[t], x + size_t(t) * E);

  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = layers_[size_t(l)];
    const int window = c.window_of(l);
    per_token(n, [&](size_t t) { rmsnorm(x + t * E, L.attn_norm.data(), E, c.rms_eps, xb + t * E); });
    attention_inputs(L, n, window ? ws.rope_swa : ws.rope, ws);
    kv.store(l, ws.k.data(), ws.v.data());
    kv.attend(l, ws.q.data(), att, window);
    matmul(L.wo, att, n, xb, ws.qx);
    if (!L.bo.empty()) add_bias(xb, L.bo.data(), E, n);
    per_token(n, [&](size_t t) {
      if (!L.attn_post_norm.empty()) rmsnorm(xb + t * E, L.attn_post_norm.data(), E, c.rms_eps, xb + t * E);
      residual(t);
      rmsnorm(x + t * E, L.ffn_norm.data(), E, c.rms_eps, xb + t * E);
    });
    const Weight* gate_up[] = {&L.w_gate, &L.w_up};
    float* gate_up_out[] = {hb, hb2};
    matmul_multi(gate_up, xb, n, gate_up_out, ws.qx);
    if (c.act == FfnAct::kGeluTanh) geglu(hb, hb2, size_t(n) * F, hb);
    else swiglu(hb, hb2, size_t(n) * F, hb);
    matmul(L.w_down, hb, n, xb, ws.qx);
    per_token(n, [&](size_t t) {
      if (!L.ffn_post_norm.empty()) rmsnorm(xb + t * E, L.ffn_post_norm.data(), E, c.rms_eps, xb + t * E);
      residual(t);
    });
  }
  // Only the rows the caller asked for go through the (large) output head.
  int n_out = 0;
  ws.logits_in.resize(size_t(n) * E);
  for (int t = 0; t < n; ++t)
    if (batch.logits[t])
      rmsnorm(x + size_t(t) * E, output_norm_.data(), E, c.rms_eps, ws.logits_in.data() + size_t(n_out++) * E);
  logits.resize(size_t(n_out) * c.n_vocab);
  // The head's 8-bit input error alone was a third of the fast path's KL
  // divergence from the float reference; refining the logits within
  // kHeadMargin of the top removes nearly all of it (docs/benchmarks.md).
  if (n_out) matmul_refined(output_, ws.logits_in.data(), n_out, kHeadMargin, logits.data(), ws.head);
}

}  // namespace cs
