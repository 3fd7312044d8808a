#include "model/llama.h"

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "base/error.h"

namespace cs {

// Q, K and V of the batch from the normed input xb, ready to store and
// attend: projected, biased (where the file has biases), normed per head
// (where it has Q/K norms), rotated with `rope`'s angles (none: a NoPE
// layer; the queries with rope_q's, when given), and the queries scaled
// where the model's attention scale is not 1/sqrt(head_dim).
void LlamaModel::attention_inputs(LayerOps& ops, const LlamaLayer& L, Tensor xb, Tensor q, Tensor k, Tensor v,
                                  const RopeTable* rope, const RopeTable* rope_q) const {
  const LlamaConfig& c = cfg_;
  const Weight* qkv[] = {&L.wq, &L.wk, &L.wv};
  const Tensor qkv_out[] = {q, k, v};
  ops.matmul(qkv, xb, qkv_out);
  if (!L.bq.empty()) ops.add_bias(q, L.bq);
  if (!L.bk.empty()) ops.add_bias(k, L.bk);
  if (!L.bv.empty()) ops.add_bias(v, L.bv);
  if (!L.q_norm.empty()) {
    ops.rmsnorm(q, L.q_norm, c.rms_eps, q);
    ops.rmsnorm(k, L.k_norm, c.rms_eps, k);
  }
  if (!rope) {
    // A NoPE layer (SmolLM3): positions only through the causal mask.
  } else if (rope_q) {  // the queries tempered by position (mistral3)
    ops.rope(q, c.head_dim, *rope_q);
    ops.rope(k, c.head_dim, *rope);
  } else {
    ops.rope_qk(q, k, c.head_dim, *rope);
  }
  if (c.q_scale != 1.0f) ops.scale(q, c.q_scale);
}

// A mixture-of-experts FFN on the normed input xb, its output written over
// xb: the router picks each token's experts; the rows are gathered by
// expert (each expert's tokens together, experts in id order), every active
// expert's gate/up and then down run in one grouped pass each (an expert's
// weights read once for all its tokens), and each token's output is the
// weighed sum of its experts' rows in expert id order. Nothing of it depends
// on which other tokens share the batch, so neither do the token's bits.
void LlamaModel::moe_ffn(LayerOps& ops, const LlamaLayer& L, Tensor xb, Workspace& ws) const {
  const LlamaConfig& c = cfg_;
  const int n = xb.rows, K = c.n_expert_used, E = c.n_expert, F = c.n_ff_exp;
  const Tensor logits = ops.shape(ws.router_logits, n, E);
  ops.matmul(L.router, xb, logits);
  if (!L.router_b.empty()) ops.add_bias(logits, L.router_b);
  const size_t nk = size_t(n) * size_t(K);
  ws.moe_ids.resize(nk);
  ws.moe_w.resize(nk);
  ops.route(c.gating, logits, K, ws.moe_ids, ws.moe_w);
  // A counting sort by expert: rows[s] is the token of slot s; each token's
  // slots, ascending, are its experts in id order.
  std::vector<int> begin(size_t(E) + 1, 0);
  for (int32_t e : ws.moe_ids) ++begin[size_t(e) + 1];
  for (int e = 0; e < E; ++e) begin[size_t(e) + 1] += begin[size_t(e)];
  std::vector<int> fill(begin.begin(), begin.end() - 1);
  ws.moe_rows.resize(nk);
  ws.moe_slots.resize(nk);
  ws.moe_slot_w.resize(nk);
  for (int t = 0; t < n; ++t) {
    std::pair<int, float> mine[64];  // (slot, weight) of the token's experts; K <= 64 (the loader checks)
    for (int j = 0; j < K; ++j) {
      const size_t i = size_t(t) * size_t(K) + size_t(j);
      const int at = fill[size_t(ws.moe_ids[i])]++;
      ws.moe_rows[size_t(at)] = t;
      mine[j] = {at, ws.moe_w[i]};
    }
    std::sort(mine, mine + K);
    for (int j = 0; j < K; ++j)
      ws.moe_slots[size_t(t) * size_t(K) + size_t(j)] = mine[j].first,
                 ws.moe_slot_w[size_t(t) * size_t(K) + size_t(j)] = mine[j].second;
  }
  const int rows = int(nk);
  const Tensor in = ops.shape(ws.moe_in, rows, c.n_embd), out = ops.shape(ws.moe_out, rows, c.n_embd);
  const Tensor gate = ops.shape(ws.gate, rows, F), up = ops.shape(ws.up, rows, F);
  ops.copy_rows(xb, ws.moe_rows, in);
  auto part = [](Tensor t, int r0, int r1) { return Tensor{t.row(r0), r1 - r0, t.cols}; };
  std::vector<const Weight*> w_gate_up, w_down;
  std::vector<Tensor> x_gate_up, y_gate_up, x_down, y_down;
  for (int e = 0; e < E; ++e) {
    const int r0 = begin[size_t(e)], r1 = begin[size_t(e) + 1];
    if (r0 == r1) continue;
    w_gate_up.push_back(&L.exp_gate[size_t(e)]), w_gate_up.push_back(&L.exp_up[size_t(e)]);
    x_gate_up.push_back(part(in, r0, r1)), x_gate_up.push_back(part(in, r0, r1));
    y_gate_up.push_back(part(gate, r0, r1)), y_gate_up.push_back(part(up, r0, r1));
    w_down.push_back(&L.exp_down[size_t(e)]);
    x_down.push_back(part(gate, r0, r1)), y_down.push_back(part(out, r0, r1));
  }
  // gpt-oss: each expert's biases on its own rows, before the activation
  // and before the weighing.
  auto add_expert_bias = [&](const std::vector<float>& b, Tensor t) {
    if (b.empty()) return;
    const size_t w = size_t(t.cols);
    for (int e = 0; e < E; ++e)
      if (begin[size_t(e)] < begin[size_t(e) + 1])
        ops.add_bias(part(t, begin[size_t(e)], begin[size_t(e) + 1]), std::span(b).subspan(size_t(e) * w, w));
  };
  ops.matmul_grouped(w_gate_up, x_gate_up, y_gate_up);
  add_expert_bias(L.exp_gate_b, gate);
  add_expert_bias(L.exp_up_b, up);
  ops.gated_ffn(c.act, gate, up);
  ops.matmul_grouped(w_down, x_down, y_down);
  add_expert_bias(L.exp_down_b, out);
  ops.combine(out, ws.moe_slots, ws.moe_slot_w, K, xb);
}

// The forward pass, read top to bottom as in llama2.c: embedding, then per
// layer (rmsnorm, q/k/v, rope, attention through the KV store, output
// projection, [post-norm], residual, rmsnorm, SwiGLU or GeGLU, [post-norm],
// residual), final norm, logits. Sliding-window layers (Gemma 3) attend to
// their window with their own RoPE angles. The operations are the backend's
// (model/layer_ops.h).
void LlamaModel::forward(const Batch& batch, KvStore& kv, Workspace& ws, std::vector<float>& logits) const {
  const LlamaConfig& c = cfg_;
  const int n = batch.size();
  for (int32_t t : batch.tokens)
    if (t < 0 || t >= c.n_vocab) throw Error("token id " + std::to_string(t) + " is out of range");
  {
    ProfScope s(ws.profile, ProfOp::kPlan);
    kv.begin_batch(batch);
  }
  if (!ws.ops) ws.ops = backend_->ops();
  std::optional<ProfilingOps> timed;
  if (ws.profile) timed.emplace(*ws.ops, *ws.profile);
  LayerOps& ops = timed ? static_cast<LayerOps&>(*timed) : *ws.ops;
  const bool dev = ops.on_device();  // the tensors are the GPU's: the logits (and a host KV's rows) cross over

  const Tensor x = ops.shape(ws.x, n, c.n_embd);    // the residual stream
  const Tensor xb = ops.shape(ws.xb, n, c.n_embd);  // a block's normed input, then its output
  const Tensor q = ops.shape(ws.q, n, c.q_width()), att = ops.shape(ws.att, n, c.q_width());
  const Tensor k = ops.shape(ws.k, n, c.kv_width()), v = ops.shape(ws.v, n, c.kv_width());
  // A mixture's FFN shapes these per step (moe_ffn); the dense width is unused there.
  const Tensor gate = c.moe() ? Tensor{} : ops.shape(ws.gate, n, c.n_ff);
  const Tensor up = c.moe() ? Tensor{} : ops.shape(ws.up, n, c.n_ff);
  {
    ProfScope s(ws.profile, ProfOp::kRope);
    ws.rope.build(batch.pos.data(), n, c.rope);
    if (c.any_window()) ws.rope_swa.build(batch.pos.data(), n, c.rope_swa);
    if (c.attn_temp_scale != 0.0f) {
      ws.rope_q = ws.rope;
      ws.rope_q.temper(batch.pos.data(), c.attn_temp_scale, c.attn_temp_floor);
    }
  }
  // Only the rows the caller asked for go through the (large) output head.
  std::vector<int> rows;
  for (int t = 0; t < n; ++t)
    if (batch.logits[size_t(t)]) rows.push_back(t);
  const RopeTable* tables[3] = {&ws.rope};
  size_t n_tables = 1;
  if (c.any_window()) tables[n_tables++] = &ws.rope_swa;
  if (c.attn_temp_scale != 0.0f) tables[n_tables++] = &ws.rope_q;
  ops.stage(std::span(tables, n_tables), rows);

  ops.embed(tok_embd_, batch.tokens, c.embd_scale, x);
  // Each residual add is fused with the norm that reads its sum (the next
  // block's input): add_rmsnorm, the same bits as add then rmsnorm.
  // A block without a norm before it (OLMo 2) reads the residual x itself.
  if (!layers_[0].attn_norm.empty()) ops.rmsnorm(x, layers_[0].attn_norm, c.rms_eps, xb);
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = layers_[size_t(l)];
    const int window = c.window_of(l);
    attention_inputs(ops, L, L.attn_norm.empty() ? x : xb, q, k, v, !c.turns(l) ? nullptr : window ? &ws.rope_swa : &ws.rope,
                     c.attn_temp_scale != 0.0f ? &ws.rope_q : nullptr);
    const LayerAttention how{window, L.sinks.empty() ? nullptr : L.sinks.data(), c.attn_softcap};
    if (dev && !kv.on_device()) {
      // The GPU's activations with the host's KV: the rows cross both ways.
      ProfScope s(ws.profile, ProfOp::kAttention);
      ws.host_q.resize(q.size()), ws.host_k.resize(k.size()), ws.host_v.resize(v.size());
      ws.host_att.resize(att.size());
      ops.to_host(q, ws.host_q.data()), ops.to_host(k, ws.host_k.data()), ops.to_host(v, ws.host_v.data());
      kv.store(l, ws.host_k.data(), ws.host_v.data());
      kv.attend(l, ws.host_q.data(), ws.host_att.data(), how);
      ops.to_device(ws.host_att.data(), att);
    } else {
      {
        ProfScope s(ws.profile, ProfOp::kKvStore);
        kv.store(l, k.data, v.data);
      }
      ProfScope s(ws.profile, ProfOp::kAttention);
      kv.attend(l, q.data, att.data, how);
    }
    ops.matmul(L.wo, att, xb);
    if (!L.bo.empty()) ops.add_bias(xb, L.bo);
    if (!L.attn_post_norm.empty()) ops.rmsnorm(xb, L.attn_post_norm, c.rms_eps, xb);
    if (c.residual_scale != 1.0f) ops.scale(xb, c.residual_scale);
    if (L.ffn_norm.empty()) ops.add(x, xb);
    else ops.add_rmsnorm(x, xb, L.ffn_norm, c.rms_eps, xb);
    if (c.moe()) {
      moe_ffn(ops, L, xb, ws);
    } else {
      const Weight* gate_up[] = {&L.w_gate, &L.w_up};
      const Tensor gate_up_out[] = {gate, up};
      ops.matmul(gate_up, L.ffn_norm.empty() ? x : xb, gate_up_out);
      ops.gated_ffn(c.act, gate, up);
      ops.matmul(L.w_down, gate, xb);
    }
    if (!L.ffn_post_norm.empty()) ops.rmsnorm(xb, L.ffn_post_norm, c.rms_eps, xb);
    if (c.residual_scale != 1.0f) ops.scale(xb, c.residual_scale);
    if (l + 1 < c.n_layers && !layers_[size_t(l) + 1].attn_norm.empty())
      ops.add_rmsnorm(x, xb, layers_[size_t(l) + 1].attn_norm, c.rms_eps, xb);
    else ops.add(x, xb);
  }
  const Tensor head_in = ops.shape(ws.head_in, int(rows.size()), c.n_embd);
  ops.copy_staged_rows(x, rows, head_in);
  ops.rmsnorm(head_in, output_norm_, c.rms_eps, head_in);
  logits.resize(rows.size() * size_t(c.n_vocab));
  // The head's 8-bit input error alone was a third of the fast path's KL
  // divergence from the float reference; refining the logits within
  // kHeadMargin of the top removes nearly all of it (docs/benchmarks.md).
  if (rows.empty()) return;
  if (dev) {  // the logits come to the host for the rows that sample
    const Tensor y = ops.shape(ws.logits, int(rows.size()), c.n_vocab);
    ops.matmul_head(output_, head_in, kHeadMargin, y);
    if (c.logit_mul != 1.0f) ops.scale(y, c.logit_mul);
    ops.to_host(y, logits.data());
  } else {
    const Tensor y{logits.data(), int(rows.size()), c.n_vocab};
    ops.matmul_head(output_, head_in, kHeadMargin, y);
    if (c.logit_mul != 1.0f) ops.scale(y, c.logit_mul);  // Granite's logit_scale
  }
  // Gemma 2's capped logits, on the host either way (the device's come over first).
  if (c.final_softcap != 0.0f) softcap(logits.data(), logits.size(), c.final_softcap);
}

}  // namespace cs
