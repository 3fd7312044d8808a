// A Llama-family model loaded from GGUF: configuration, weights (used in place
// from the file mapping), tokenizer and the forward pass. The weights are
// immutable after load; forward() uses a caller-owned Workspace, so one model
// can serve several engines, each with its own workspace and KV store.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_store.h"
#include "model/chat_template.h"
#include "model/cpu_ops.h"
#include "model/gguf.h"
#include "model/layer_ops.h"
#include "model/op_profile.h"
#include "model/tokenizer.h"

namespace cs {

// One of the architectures of model/arch.cpp (Llama 1-3.x and Mistral files
// and the others it lists). head_dim is n_embd / n_heads unless the file says
// otherwise (Qwen 3's attention.key_length), so the query width n_heads *
// head_dim may differ from n_embd.
struct LlamaConfig {
  std::string arch;
  int n_layers = 0, n_embd = 0, n_ff = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;
  // LongRoPE (Phi-3.5, Phi-4-mini): two sets of frequency divisors, the
  // short ones for a context up to rope_long_after positions
  // (rope.scaling.original_context_length), the long ones beyond it.
  // rope.factors is the set in use (LlamaModel::set_context); empty: none.
  std::vector<float> rope_short_factors, rope_long_factors;
  int rope_long_after = 0;
  bool long_rope() const { return !rope_long_factors.empty(); }
  bool long_factors_for(int n_ctx) const { return long_rope() && n_ctx > rope_long_after; }
  // Whether the long factors turn the angles now (a KV cache made with one
  // set is not the other's).
  bool uses_long_factors() const { return long_rope() && rope.factors == rope_long_factors; }
  bool tied_embeddings = false;  // no output.weight: the head is token_embd
  float embd_scale = 1.0f;       // embeddings are multiplied by it (Gemma: sqrt(n_embd); Granite's embedding_scale)
  // Granite: each block's output is multiplied by residual_scale before its
  // residual, and the logits by logit_mul (1 / logit_scale).
  float residual_scale = 1.0f, logit_mul = 1.0f;
  // Gemma 2's soft-capping: attention scores s -> attn_softcap * tanh(s /
  // attn_softcap) (in the attention kernels), logits likewise by
  // final_softcap; 0: none.
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  FfnAct act = FfnAct::kSilu;
  MoeGating gating = MoeGating::kSoftmaxNorm;  // a mixture's router (model/arch.h)
  // SmolLM3's NoPE layers: every no_rope_every-th (1-based) turns nothing.
  int no_rope_every = 0;
  bool turns(int layer) const { return no_rope_every == 0 || (layer + 1) % no_rope_every != 0; }
  // Llama 4's attention temperature (mistral3's attention.temperature_scale):
  // a query at position p is multiplied by 1 + attn_temp_scale * ln(1 +
  // floor(p / attn_temp_floor)) after RoPE, so attention stays sharp past
  // the original context (attn_temp_floor positions); 0: none.
  float attn_temp_scale = 0.0f;
  int attn_temp_floor = 0;
  // Queries are multiplied by q_scale before attention, whose kernels scale
  // scores by 1/sqrt(head_dim): 1 unless the model's attention scale is
  // another (Gemma 2 27B, Gemma 3 27B: 1/sqrt(n_embd / n_heads)).
  float q_scale = 1.0f;
  // Sliding-window layers (Gemma 3, gpt-oss): per layer, the window in positions
  // (0: global), and their own RoPE (rope_swa).
  std::vector<int> window;
  RopeParams rope_swa;
  int window_of(int layer) const { return window.empty() ? 0 : window[size_t(layer)]; }
  bool any_window() const {
    for (int w : window)
      if (w > 0) return true;
    return false;
  }
  // Mixture of experts (qwen3moe): experts per layer, experts a token runs,
  // and each expert's FFN width; 0 for a dense model.
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool moe() const { return n_expert > 0; }
  int q_width() const { return n_heads * head_dim; }
  int kv_width() const { return n_kv_heads * head_dim; }
  KvShape kv_shape() const { return {n_layers, n_heads, n_kv_heads, head_dim}; }
};

// A layer's weights. The optional ones are empty when the file has none:
// biases (required by Qwen 2, allowed on Llama) and per-head Q/K norms (Qwen 3).
struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> attn_post_norm, ffn_post_norm;  // Gemma 3: on each block's output
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  std::vector<float> bq, bk, bv, bo;
  std::vector<float> q_norm, k_norm;  // head_dim values each
  // Mixture of experts (in place of w_gate, w_up, w_down): the router, a
  // n_expert x n_embd matrix, and each expert's FFN.
  Weight router;
  std::vector<Weight> exp_gate, exp_up, exp_down;
  // gpt-oss: the router's and the experts' biases (expert e's F or n_embd
  // values after e - 1's; empty where the file has none) and the attention
  // sinks, a logit per query head.
  std::vector<float> router_b, exp_gate_b, exp_up_b, exp_down_b;
  std::vector<float> sinks;
};

// Scratch of one forward call, reused between calls: the activations, the
// RoPE angles, and the backend's executor with its own scratch (made by the
// first call).
struct Workspace {
  TensorBuf x, xb, q, k, v, att, gate, up, head_in;
  // Mixture of experts: router logits, the tokens' rows gathered by expert
  // and the experts' outputs (gate and up above hold their FFN values).
  TensorBuf router_logits, moe_in, moe_out;
  std::vector<int32_t> moe_ids;        // per token, its experts (n x k)
  std::vector<float> moe_w;            // and their weights
  std::vector<int> moe_rows;           // the token of each gathered row (rows grouped by expert)
  std::vector<int> moe_slots;          // per token, its gathered rows in expert id order (n x k)
  std::vector<float> moe_slot_w;       // and their weights
  RopeTable rope, rope_swa;  // global layers' angles; sliding layers' (when they differ)
  RopeTable rope_q;          // the queries' own, tempered (attn_temp_scale), when set
  // A device backend with a host KV store: the rows that cross (q, k, v and
  // the attention's output), and the head's logits on the device.
  std::vector<float> host_q, host_k, host_v, host_att;
  TensorBuf logits;
  std::unique_ptr<LayerOps> ops;
  OpProfile* profile = nullptr;  // when set, forward adds each operation's time to it

};

// The output head refines the logits within this many nats of a row's top
// (matmul_refined): a token further below has under e^-8 of the top's
// probability and keeps the 8-bit input's precision.
constexpr float kHeadMargin = 8.0f;

class LlamaModel {
 public:
  // Throws cs::Error naming the file and the problem (missing tensor, wrong
  // shape, unsupported architecture, ...). The backend packs the weights and
  // runs the layers; it outlives the model.
  static std::unique_ptr<LlamaModel> load(const std::string& path, const Backend& backend = cpu_backend());

  const LlamaConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  // The chat template: the file's, else ChatML. A file template that does not
  // compile also gives ChatML, and chat_note() says why.
  const ChatTemplate& chat() const { return *chat_; }
  // The template of a conversation that offers tools: the file's own for
  // them where it names one (tokenizer.chat_template.tool_use: Hermes 2 Pro
  // and 3, Command R ship their tool formats so, and Hugging Face's
  // apply_chat_template and llama.cpp take it when tools are given), else
  // chat().
  const ChatTemplate& chat_for_tools() const { return chat_tools_ ? *chat_tools_ : *chat_; }
  bool has_tool_template() const { return chat_tools_ != nullptr; }
  // One line for the log when chat() is not the file's own template, or the
  // file's template for tools does not compile ("" else).
  const std::string& chat_note() const { return chat_note_; }
  // Replaces the chat template, for conversations with tools too
  // (--chat-template FILE); throws jinja::TemplateError when `source` does
  // not compile.
  void set_chat_template(const std::string& source);
  // The context the model will run at, in positions: a file with LongRoPE
  // factors (Phi-3.5, Phi-4-mini) turns with its long ones when this is
  // more than rope.scaling.original_context_length, else its short ones, as
  // llama.cpp chooses them for its context. Load chooses for the trained
  // context (the engine's default); call this before any KV is made.
  // Other files: no effect.
  void set_context(int n_ctx);
  const GgufFile& file() const { return *file_; }
  const Backend& backend() const { return *backend_; }
  // The weights as loaded (the float reference, model/reference.h, reads them).
  const Weight& tok_embd() const { return tok_embd_; }
  const Weight& output() const { return output_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }

  // Runs the batch: writes K/V into kv and returns, in `logits`, one row of
  // n_vocab values per token whose logits flag is set, in batch order.
  // Throws KvError (nothing changed) when kv has no room.
  void forward(const Batch& batch, KvStore& kv, Workspace& ws, std::vector<float>& logits) const;

 private:
  LlamaModel() = default;
  const ArchTraits& load_config();
  void load_weights(const ArchTraits& traits);
  void attention_inputs(LayerOps& ops, const LlamaLayer& L, Tensor xb, Tensor q, Tensor k, Tensor v,
                        const RopeTable* rope, const RopeTable* rope_q = nullptr) const;
  void moe_ffn(LayerOps& ops, const LlamaLayer& L, Tensor xb, Workspace& ws) const;

  const Backend* backend_ = nullptr;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<ChatTemplate> chat_tools_;  // null: chat_ serves tools too
  std::string chat_note_;
  LlamaConfig cfg_;
  Weight tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LlamaLayer> layers_;
};

}  // namespace cs
