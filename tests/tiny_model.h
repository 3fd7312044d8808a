// A small random model written as a GGUF file (F32 weights, a SentencePiece
// vocabulary of byte tokens and a few words), for engine tests that must run
// fast under the sanitizers. Its outputs are meaningless but deterministic,
// which is all exactness tests need. Any supported architecture: Qwen 2's
// files get Q/K/V biases, Qwen 3's per-head Q/K norms (and head_dim, when
// set, as attention.key_length); Llama's may get Llama 3's rope_freqs.
#pragma once
#include <string>

namespace cs::test {

struct TinyModelShape {
  int n_layers = 2, n_embd = 128, n_heads = 2, n_kv_heads = 1, n_ff = 256, n_ctx = 1024;
  unsigned seed = 1;
  float output_scale = 0.2f;  // 0: every logit is 0 (a uniform next-token distribution)
  const char* arch = "llama";
  int head_dim = 0;         // 0: n_embd / n_heads
  bool tied = false;        // no output.weight
  bool rope_freqs = false;  // Llama 3's frequency factors
  float rope_base = 10000.0f;
  bool arch_tensors = true;       // false: leave out the biases or Q/K norms the architecture needs
  const char* rope_scaling = "";  // rope.scaling.type, when set
  float rope_scaling_factor = 0;  // rope.scaling.factor, when set
  int rope_orig_ctx = 0;          // rope.scaling.original_context_length, when set
  int window = 0;                 // attention.sliding_window (Gemma 3), when set
  int rope_dims = 0;              // rope.dimension_count, when set (Phi-4-mini turns part of each head)
  // LongRoPE (Phi-3.5, Phi-4-mini): rope_factors_short/long and
  // rope.scaling.attn_factor, the long factors beyond this original context.
  int long_rope_after = 0;
  // phi3: Q/K/V in one attn_qkv and gate/up in one ffn_up; false: the very
  // same values as separate tensors (attn_q/k/v, ffn_gate/up).
  bool fused = true;
  // mistral3: attention.temperature_scale, rope.scaling.yarn_log_multiplier
  // and yarn_beta_slow, when set.
  float attn_temp_scale = 0, yarn_log_mul = 0, yarn_beta_slow = 0;
  // granite: embedding_scale, residual_scale, logit_scale, attention.scale, when set.
  float embedding_scale = 0, residual_scale = 0, logit_scale = 0, attention_scale = 0;
  // gemma2: attn_logit_softcapping and final_logit_softcapping, when set.
  float attn_softcap = 0, final_softcap = 0;
  // Mixture of experts (qwen3moe): experts per layer, experts per token, each expert's FFN width.
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  // The matrices' type (ggml's id): 0 F32, 2 Q4_0 or 8 Q8_0 (rows of whole
  // blocks of 32; norms, biases and vectors stay F32).
  uint32_t matrix_type = 0;
};

// One tiny model per supported architecture, with its departures from
// Llama: "llama3" (GQA 4:1, tied embeddings, rope_freqs), "qwen2" (biases,
// RoPE by halves), "qwen3" (Q/K norms, head_dim 128 over a 128-wide embedding),
// "gemma3" (6 layers, 5 of them sliding over 40 positions, head_dim 256 with
// one KV head, Q/K norms, post-norms, GeGLU, scaled embeddings), "qwen3moe"
// (Qwen 3's attention, 8 experts of 64 a layer, 2 per token), "gpt-oss"
// (4 layers, the even ones sliding; attention sinks; YaRN; biases on Q/K/V,
// the output, the router and the experts; 8 experts of 64, 4 per token,
// weighed by a softmax over the chosen; clamped SwiGLU), "phi3" (head dim 96,
// fused Q/K/V and gate/up, RoPE over 64 of each head's 96 dimensions,
// LongRoPE's short and long factors with the long ones in use, a
// sliding_window key that stays unused), "mistral3" (YaRN with its beta and
// log-multiplier keys, the queries tempered from position 16 on), "smollm3"
// (4 layers, the 4th without RoPE), "granite" (Granite 3's embedding,
// residual, attention and logit multipliers), "gemma2" (4 layers, the even
// ones sliding over 24 positions, head dim 128, post-norms, GeGLU, scaled
// embeddings, scores and logits soft-capped near their own size), "olmo2"
// (no pre-norms, post-norms, Q/K norms over the whole projection; OLMo 3's
// sliding windows on 3 of 4 layers, unscaled RoPE there and YaRN elsewhere),
// "glm4" (fused Q/K/V with a bias and fused gate/up, pre- and post-norms,
// RoPE on adjacent pairs over half of each head).
TinyModelShape tiny_arch_shape(const std::string& variant);
// Every variant tiny_arch_shape makes, for tests run once per architecture.
inline constexpr const char* kTinyArchs[] = {"llama3", "qwen2", "qwen3", "gemma3", "qwen3moe", "gpt-oss", "phi3",
                                             "mistral3", "smollm3", "granite", "gemma2", "olmo2", "glm4"};
// An architecture's name as a GoogleTest name ("gpt-oss" -> "gpt_oss").
std::string arch_test_name(const char* arch);

// Writes the model under the test temp dir (once per name); returns its path.
std::string tiny_model(const std::string& name = "tiny", TinyModelShape shape = {});

}  // namespace cs::test
