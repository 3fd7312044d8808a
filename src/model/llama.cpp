#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace cs {
namespace {

std::vector<float> load_vector(const GgufFile& f, const std::string& name, int n) {
  const GgufTensor& t = f.tensor(name);
  if (t.n_elements != uint64_t(n))
    f.fail("tensor '" + name + "' has " + std::to_string(t.n_elements) + " values, expected " +
           std::to_string(n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.type, t.data, out.data(), out.size());
  return out;
}

// A weight of shape [rows][cols] (GGUF ne = {cols, rows}).
Weight load_matrix(const GgufFile& f, const GgufTensor& t, int rows, int cols) {
  if (t.n_dims != 2 || t.ne[0] != cols || t.ne[1] != rows)
    f.fail("tensor '" + t.name + "' has shape [" + std::to_string(t.ne[0]) + ", " +
           std::to_string(t.ne[1]) + "], expected [" + std::to_string(cols) + ", " +
           std::to_string(rows) + "]");
  const TypeInfo info = *type_info(uint32_t(t.type));
  if (info.block_elems > 1 && cols % kQBlock)
    f.fail("tensor '" + t.name + "' rows are not whole quantization blocks");
  return make_weight(t.type, rows, cols, t.data);
}

Weight load_matrix(const GgufFile& f, const std::string& name, int rows, int cols) {
  return load_matrix(f, f.tensor(name), rows, cols);
}

int positive(const GgufFile& f, const std::string& key) {
  const uint64_t v = f.get_uint(key);
  if (v == 0 || v > (1u << 24)) f.fail("key '" + key + "' has implausible value " + std::to_string(v));
  return int(v);
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path) {
  std::unique_ptr<LlamaModel> m(new LlamaModel);
  m->file_ = std::make_unique<GgufFile>(path);
  const GgufFile& f = *m->file_;
  LlamaConfig& c = m->cfg_;
  c.arch = f.get_string("general.architecture");
  if (c.arch != "llama")
    f.fail("unsupported architecture '" + c.arch + "' (supported: llama)");
  const std::string a = c.arch + ".";
  c.n_layers = positive(f, a + "block_count");
  c.n_embd = positive(f, a + "embedding_length");
  c.n_ff = positive(f, a + "feed_forward_length");
  c.n_heads = positive(f, a + "attention.head_count");
  c.n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(f, a + "attention.head_count_kv")
                                                       : c.n_heads;
  if (c.n_embd % c.n_heads || c.n_heads % c.n_kv_heads)
    f.fail("head counts do not divide the embedding width");
  c.head_dim = c.n_embd / c.n_heads;
  c.rot_dim = int(f.get_uint(a + "rope.dimension_count", uint64_t(c.head_dim)));
  if (c.rot_dim > c.head_dim || c.rot_dim % 2) f.fail("invalid rope.dimension_count");
  c.rope_base = f.get_float(a + "rope.freq_base", 10000.0);
  c.rms_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.n_ctx_train = int(f.get_uint(a + "context_length", 2048));

  m->tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(f));
  const GgufTensor& emb = f.tensor("token_embd.weight");
  c.n_vocab = int(emb.ne[1]);
  if (c.n_vocab != m->tok_->vocab_size())
    f.fail("token_embd.weight has " + std::to_string(c.n_vocab) + " rows but the vocabulary has " +
           std::to_string(m->tok_->vocab_size()) + " tokens");
  m->tok_embd_ = load_matrix(f, emb, c.n_vocab, c.n_embd);
  // Models with tied embeddings have no output.weight: reuse the embedding.
  const GgufTensor* out = f.find_tensor("output.weight");
  m->output_ = out ? load_matrix(f, *out, c.n_vocab, c.n_embd) : load_matrix(f, emb, c.n_vocab, c.n_embd);
  m->output_norm_ = load_vector(f, "output_norm.weight", c.n_embd);

  const int kv_w = c.n_kv_heads * c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayer L;
    L.attn_norm = load_vector(f, p + "attn_norm.weight", c.n_embd);
    L.ffn_norm = load_vector(f, p + "ffn_norm.weight", c.n_embd);
    L.wq = load_matrix(f, p + "attn_q.weight", c.n_embd, c.n_embd);
    L.wk = load_matrix(f, p + "attn_k.weight", kv_w, c.n_embd);
    L.wv = load_matrix(f, p + "attn_v.weight", kv_w, c.n_embd);
    L.wo = load_matrix(f, p + "attn_output.weight", c.n_embd, c.n_embd);
    L.w_gate = load_matrix(f, p + "ffn_gate.weight", c.n_ff, c.n_embd);
    L.w_up = load_matrix(f, p + "ffn_up.weight", c.n_ff, c.n_embd);
    L.w_down = load_matrix(f, p + "ffn_down.weight", c.n_embd, c.n_ff);
    m->layers_.push_back(std::move(L));
  }
  return m;
}

void LlamaModel::embed(int32_t token, float* out) const {
  dequantize_row(tok_embd_.type, tok_embd_.data + size_t(token) * tok_embd_.row_bytes, out,
                 size_t(cfg_.n_embd));
}

// The forward pass, read top to bottom as in llama2.c: embedding, then per
// layer (rmsnorm, q/k/v, rope, attention through the KV store, output
// projection, residual, rmsnorm, SwiGLU, residual), final norm, logits.
void LlamaModel::forward(const Batch& batch, KvStore& kv, Workspace& ws,
                         std::vector<float>& logits) const {
  const LlamaConfig& c = cfg_;
  const int n = batch.size();
  const int E = c.n_embd, F = c.n_ff, KW = c.n_kv_heads * c.head_dim;
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= c.n_vocab) throw Error("token id " + std::to_string(t) + " is out of range");
  kv.begin_batch(batch);

  ws.x.resize(size_t(n) * E);
  ws.xb.resize(size_t(n) * E);
  ws.q.resize(size_t(n) * E);
  ws.att.resize(size_t(n) * E);
  ws.k.resize(size_t(n) * KW);
  ws.v.resize(size_t(n) * KW);
  ws.hb.resize(size_t(n) * F);
  ws.hb2.resize(size_t(n) * F);
  float *x = ws.x.data(), *xb = ws.xb.data(), *q = ws.q.data(), *k = ws.k.data(),
        *v = ws.v.data(), *att = ws.att.data(), *hb = ws.hb.data(), *hb2 = ws.hb2.data();
  ws.rope.build(batch.pos.data(), n, c.rot_dim, c.rope_base);

  // The per-token steps (norms, rope, residuals) run between parallel
  // matmuls: in a prefill they are split over the threads too, or one core
  // idles. Each token is computed alone, so no bit depends on the split.
  auto per_token = [n](auto&& step) {
#pragma omp parallel for schedule(static) if (n >= 32)
    for (int t = 0; t < n; ++t) step(size_t(t));
  };
  auto residual = [&](size_t t) {
    for (int i = 0; i < E; ++i) x[t * E + size_t(i)] += xb[t * E + size_t(i)];
  };

  for (int t = 0; t < n; ++t) embed(batch.tokens[t], x + size_t(t) * E);

  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = layers_[size_t(l)];
    per_token([&](size_t t) { rmsnorm(x + t * E, L.attn_norm.data(), E, c.rms_eps, xb + t * E); });
    const Weight* qkv[] = {&L.wq, &L.wk, &L.wv};
    float* qkv_out[] = {q, k, v};
    matmul_multi(qkv, xb, n, qkv_out, ws.qx);
    per_token([&](size_t t) {
      rope(q + t * E, c.n_heads, c.head_dim, ws.rope, int(t));
      rope(k + t * KW, c.n_kv_heads, c.head_dim, ws.rope, int(t));
    });
    kv.store(l, k, v);
    kv.attend(l, q, att);
    matmul(L.wo, att, n, xb, ws.qx);
    per_token([&](size_t t) {
      residual(t);
      rmsnorm(x + t * E, L.ffn_norm.data(), E, c.rms_eps, xb + t * E);
    });
    const Weight* gate_up[] = {&L.w_gate, &L.w_up};
    float* gate_up_out[] = {hb, hb2};
    matmul_multi(gate_up, xb, n, gate_up_out, ws.qx);
    swiglu(hb, hb2, size_t(n) * F, hb);
    matmul(L.w_down, hb, n, xb, ws.qx);
    per_token(residual);
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
