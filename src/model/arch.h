// What sets one supported architecture apart from another, in one table.
// The loader (llama.cpp in this directory) reads an architecture's traits
// to know which tensors and keys it must find; the forward pass then acts on
// what was loaded (a bias present is added, a Q/K norm present is applied),
// never on the architecture's name.
#pragma once
#include <string>
#include <string_view>

namespace cs {

// How RoPE pairs a head's dimensions. GGUF's llama converter permutes Q and K
// so that adjacent values rotate together (ggml's "normal" mode); Qwen's
// files keep the Hugging Face order, where dimension i turns with i + n/2
// (ggml's "neox" mode).
enum class RopeStyle { kAdjacent, kHalves };

// The feed-forward block's gate: SwiGLU (silu), GeGLU (tanh-GELU, Gemma), or
// gpt-oss's clamped SwiGLU: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1).
enum class FfnAct { kSilu, kGeluTanh, kSwigluOai };

// How a mixture's router weighs the experts it picks. kSoftmaxNorm (Qwen3-MoE):
// softmax over all experts' logits, the k most probable, their probabilities
// renormalized to sum 1. kSoftmaxChosen (gpt-oss): the k highest logits, a
// softmax over those k alone.
enum class MoeGating { kSoftmaxNorm, kSoftmaxChosen };

struct ArchTraits {
  std::string_view name;
  RopeStyle rope = RopeStyle::kAdjacent;
  bool qkv_bias = false;  // attn_{q,k,v}.bias required (Qwen 2); optional elsewhere
  bool qk_norm = false;   // attn_{q,k}_norm.weight: an RMSNorm over each head before RoPE (Qwen 3, Gemma 3)
  // Gemma 2 and 3 (and OLMo 2, GLM-4): post_attention_norm / post_ffw_norm
  // on each block's output before its residual; Gemma's embeddings times
  // sqrt(n_embd) (scale_embd) and GeGLU.
  bool post_norms = false;
  bool scale_embd = false;
  FfnAct act = FfnAct::kSilu;
  // Sliding-window attention: every swa_pattern-th layer (1-based) attends
  // globally, the others to attention.sliding_window positions, with RoPE
  // base rope_base_swa and no scaling (Gemma 3: 6 and 10000, as llama.cpp
  // sets them; the GGUF carries neither); rope_base_swa 0: the global
  // layers' RoPE, scaling included (gpt-oss). swa_pattern 0: every layer global.
  int swa_pattern = 0;
  double rope_base_swa = 10000.0;
  // Mixture of experts (Qwen3-MoE): each layer's FFN is expert_count experts
  // (ffn_{gate,up,down}_exps, expert_feed_forward_length wide) behind a
  // router (ffn_gate_inp); a token runs the expert_used_count experts of
  // highest softmax probability, its outputs weighed by those
  // probabilities renormalized to sum 1.
  bool moe = false;
  MoeGating gating = MoeGating::kSoftmaxNorm;
  // gpt-oss: attn_sinks (a logit per query head in each softmax,
  // kv/kv_store.h), biases on the attention output, the router and every
  // expert's three matrices, and the FFN's input norm under another name.
  bool sinks = false;
  bool moe_biases = false;
  std::string_view ffn_norm = "ffn_norm";
  // Phi-3: ffn_up holds the gate's rows, then the up projection's (2 x
  // feed_forward_length rows), and there is no ffn_gate.
  bool fused_gate_up = false;
  // Ministral 3 and recent Mistral Small files (arch "mistral3"): YaRN's
  // beta and log-multiplier keys, and Llama 4's attention temperature.
  bool yarn_keys = false;
  // SmolLM3: every no_rope_every-th layer (1-based) leaves Q and K unrotated
  // (NoPE); 0: every layer turns them.
  int no_rope_every = 0;
  // Granite 3: embedding_scale, residual_scale and logit_scale keys (the
  // embeddings times the first, each block's output times the second before
  // its residual, the logits divided by the third).
  bool granite_scales = false;
  // Gemma 2: attention scores and the logits soft-capped, x -> cap * tanh(x
  // / cap), by attn_logit_softcapping and final_logit_softcapping (50 and 30
  // when the file has neither, as llama.cpp takes them).
  bool softcaps = false;
  // The sliding window when the file has no attention.sliding_window (Gemma
  // 2: 4096, llama.cpp's default for it); 0: no sliding layers then.
  int default_window = 0;
  // OLMo 2: no norm before the attention or the FFN (attn_norm, ffn_norm
  // absent: each block reads the residual itself, its output post-normed),
  // and Q/K norms over the whole projection rather than each head.
  bool pre_norms = true;
  bool qk_norm_full = false;
  // OLMo 3 (arch olmo2 with attention.sliding_window): the sliding layers
  // turn with the global base (rope.freq_base_swa aside) but unscaled.
  bool swa_rope_unscaled = false;
  // GLM-4: rope.dimension_sections (M-RoPE, the vision models') and
  // nextn_predict_layers (multi-token prediction layers) are refused when set.
  bool glm_keys = false;
};

// nullptr for an architecture we do not run.
const ArchTraits* find_arch(std::string_view name);

// "llama, qwen2, qwen3", for errors and `chunkserve info`.
std::string supported_arch_names();

}  // namespace cs
