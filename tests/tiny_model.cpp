#include "tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/f16.h"
#include "gguf_writer.h"

namespace cs::test {

TinyModelShape tiny_arch_shape(const std::string& variant) {
  TinyModelShape s;
  if (variant == "llama3") {
    s.n_embd = 256, s.n_heads = 4, s.n_kv_heads = 1, s.tied = true, s.rope_freqs = true, s.rope_base = 500000.0f;
  } else if (variant == "qwen2") {
    s.arch = "qwen2", s.rope_base = 1000000.0f;
  } else if (variant == "qwen3") {
    s.arch = "qwen3", s.head_dim = 128, s.rope_base = 1000000.0f, s.tied = true;
  } else if (variant == "qwen3moe") {
    s.arch = "qwen3moe", s.head_dim = 128, s.rope_base = 1000000.0f, s.tied = true;
    s.n_expert = 8, s.n_expert_used = 2, s.n_ff_exp = 64;
  } else if (variant == "gpt-oss") {
    // 4 layers, the even ones sliding over 24 positions; YaRN; 8 experts of
    // 64, 4 per token; head_dim 64 with queries 256 wide over a 128-wide
    // embedding; sinks and biases everywhere.
    s.arch = "gpt-oss", s.n_layers = 4, s.n_heads = 4, s.n_kv_heads = 2, s.head_dim = 64, s.rope_base = 150000.0f;
    s.window = 24, s.rope_scaling = "yarn", s.rope_scaling_factor = 4, s.rope_orig_ctx = 256;
    s.n_expert = 8, s.n_expert_used = 4, s.n_ff_exp = 64;
  } else if (variant == "phi3") {
    // Phi-3.5-mini's head dim (96), RoPE over part of it as Phi-4-mini's.
    s.arch = "phi3", s.n_embd = 192, s.rope_dims = 64, s.long_rope_after = 256, s.window = 24;
  } else if (variant == "mistral3") {
    // Positions past 16 are tempered (by up to 1 + 0.3 ln 64 over 1024).
    s.arch = "mistral3", s.rope_base = 1000000.0f, s.rope_scaling = "yarn", s.rope_scaling_factor = 4;
    s.rope_orig_ctx = 16, s.attn_temp_scale = 0.3f, s.yarn_log_mul = 0.5f, s.yarn_beta_slow = 0.5f;
  } else if (variant == "smollm3") {
    s.arch = "smollm3", s.n_layers = 4, s.tied = true;
  } else if (variant == "granite") {
    // Granite 3's multipliers, of a size the outputs show.
    s.arch = "granite", s.tied = true, s.embedding_scale = 3.0f, s.residual_scale = 0.4f, s.logit_scale = 2.0f;
    s.attention_scale = 0.2f;
  } else if (variant == "olmo2") {
    // OLMo 3's shape of it: 4 layers, the first 3 sliding over 24 positions
    // (unscaled RoPE there), YaRN on the global one.
    s.arch = "olmo2", s.n_layers = 4, s.rope_base = 500000.0f, s.window = 24;
    s.rope_scaling = "yarn", s.rope_scaling_factor = 4, s.rope_orig_ctx = 256;
  } else if (variant == "glm4") {
    // Fused Q/K/V (with a bias) and gate/up, post-norms, RoPE on adjacent
    // pairs over half of each head.
    s.arch = "glm4", s.n_layers = 3, s.rope_dims = 32;
  } else if (variant == "gemma2") {
    // Caps near the sizes of the scores (std ~3) and logits (std ~1), so
    // both bend most values.
    s.arch = "gemma2", s.n_layers = 4, s.head_dim = 128, s.tied = true, s.window = 24;
    s.output_scale = 0.1f, s.attn_softcap = 3.0f, s.final_softcap = 1.5f;
  } else if (variant == "gemma3") {
    s.arch = "gemma3", s.n_layers = 6, s.head_dim = 256, s.rope_base = 1000000.0f, s.tied = true, s.window = 40;
    s.output_scale = 0.02f;  // embeddings are scaled by sqrt(n_embd) on the way in
  }
  return s;
}

std::string arch_test_name(const char* arch) {
  std::string s = arch;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::string tiny_model(const std::string& name, TinyModelShape s) {
  GgufWriter w;
  const std::string a = std::string(s.arch) + ".";
  w.kv_str("general.architecture", s.arch);
  w.kv_u32(a + "block_count", uint32_t(s.n_layers));
  w.kv_u32(a + "embedding_length", uint32_t(s.n_embd));
  w.kv_u32(a + "feed_forward_length", uint32_t(s.n_ff));
  w.kv_u32(a + "attention.head_count", uint32_t(s.n_heads));
  w.kv_u32(a + "attention.head_count_kv", uint32_t(s.n_kv_heads));
  w.kv_u32(a + "context_length", uint32_t(s.n_ctx));
  w.kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_f32(a + "rope.freq_base", s.rope_base);
  if (*s.rope_scaling) w.kv_str(a + "rope.scaling.type", s.rope_scaling);
  if (s.rope_scaling_factor) w.kv_f32(a + "rope.scaling.factor", s.rope_scaling_factor);
  if (s.rope_orig_ctx) w.kv_u32(a + "rope.scaling.original_context_length", uint32_t(s.rope_orig_ctx));
  if (s.window) w.kv_u32(a + "attention.sliding_window", uint32_t(s.window));
  if (s.rope_dims) w.kv_u32(a + "rope.dimension_count", uint32_t(s.rope_dims));
  if (s.attn_temp_scale) w.kv_f32(a + "attention.temperature_scale", s.attn_temp_scale);
  if (s.embedding_scale) w.kv_f32(a + "embedding_scale", s.embedding_scale);
  if (s.residual_scale) w.kv_f32(a + "residual_scale", s.residual_scale);
  if (s.logit_scale) w.kv_f32(a + "logit_scale", s.logit_scale);
  if (s.attention_scale) w.kv_f32(a + "attention.scale", s.attention_scale);
  if (s.attn_softcap) w.kv_f32(a + "attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap) w.kv_f32(a + "final_logit_softcapping", s.final_softcap);
  if (s.yarn_log_mul) w.kv_f32(a + "rope.scaling.yarn_log_multiplier", s.yarn_log_mul);
  if (s.yarn_beta_slow) w.kv_f32(a + "rope.scaling.yarn_beta_slow", s.yarn_beta_slow);
  if (s.long_rope_after) {
    w.kv_u32(a + "rope.scaling.original_context_length", uint32_t(s.long_rope_after));
    // Phi-3's converter: sqrt(1 + ln(growth) / ln(original context)).
    w.kv_f32(a + "rope.scaling.attn_factor",
             std::sqrt(1.0f + std::log(float(s.n_ctx) / float(s.long_rope_after)) / std::log(float(s.long_rope_after))));
  }
  if (s.n_expert) {
    w.kv_u32(a + "expert_count", uint32_t(s.n_expert));
    w.kv_u32(a + "expert_used_count", uint32_t(s.n_expert_used));
    w.kv_u32(a + "expert_feed_forward_length", uint32_t(s.n_ff_exp));
  }
  if (s.head_dim) {
    w.kv_u32(a + "attention.key_length", uint32_t(s.head_dim));
    w.kv_u32(a + "attention.value_length", uint32_t(s.head_dim));
  }
  // <unk> <s> </s>, the 256 byte tokens, then words.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    tokens.push_back(hex);
    types.push_back(6);
  }
  const std::string sp = "\xe2\x96\x81";  // SentencePiece's space
  for (const std::string& word : {sp + "the", sp + "a", sp + "cat", sp + "dog", sp + "sat", sp + "on", sp + "mat",
                                 sp + "is", sp, std::string("t"), std::string("h"), std::string("e")}) {
    tokens.push_back(word);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
  w.kv_str("tokenizer.ggml.model", "llama");
  w.kv_strs("tokenizer.ggml.tokens", tokens);
  w.kv_f32s("tokenizer.ggml.scores", scores);
  w.kv_i32s("tokenizer.ggml.token_type", types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);

  const uint64_t E = uint64_t(s.n_embd), F = uint64_t(s.n_ff), V = tokens.size();
  const uint64_t D = s.head_dim ? uint64_t(s.head_dim) : E / uint64_t(s.n_heads);
  const uint64_t QW = D * uint64_t(s.n_heads), KW = D * uint64_t(s.n_kv_heads);
  const bool oss = std::string(s.arch) == "gpt-oss";
  const bool biases = s.arch_tensors && (std::string(s.arch) == "qwen2" || oss);
  const bool gemma = std::string(s.arch) == "gemma3";
  const bool qk_norm = s.arch_tensors && (std::string(s.arch) == "qwen3" || std::string(s.arch) == "qwen3moe" || gemma);
  const bool olmo = std::string(s.arch) == "olmo2";
  const bool glm = std::string(s.arch) == "glm4";  // no pre-norms; Q/K norms over the whole projection
  const bool post_norms = s.arch_tensors && (gemma || olmo || glm || std::string(s.arch) == "gemma2");
  const bool fused = s.fused && (std::string(s.arch) == "phi3" || glm);
  std::vector<uint8_t> data;
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> nd;
  // F32 tensor of shape ne (ne[0] = columns), values scale * N(0, 1) (or
  // exactly 1 for norms), 32-byte aligned in the data section.
  // Frequency factors as Llama 3's converter makes them: 1 for fast
  // dimensions, up to 8 for slow ones.
  // A matrix (2 or 3 dims) in s.matrix_type instead: each block of 32 with
  // d = amax / 127 (Q8_0) or the largest-magnitude value / -8 (Q4_0).
  auto add = [&](const std::string& tname, std::vector<uint64_t> ne, float scale, bool ones = false,
                 bool factors = false) {
    while (data.size() % 32) data.push_back(0);
    const bool quantized = s.matrix_type != 0 && ne.size() >= 2 && ne[0] % 32 == 0;
    w.tensor(tname, ne, quantized ? s.matrix_type : 0, data.size());
    uint64_t n = 1;
    for (auto x : ne) n *= x;
    std::vector<float> vals(n);
    for (uint64_t i = 0; i < n; ++i)
      vals[i] = factors ? 1.0f + 7.0f * float(i) / float(n) : ones ? 1.0f + 0.1f * nd(rng) : scale * nd(rng);
    if (!quantized) {
      const auto* p = reinterpret_cast<const uint8_t*>(vals.data());
      data.insert(data.end(), p, p + 4 * n);
      return;
    }
    for (uint64_t b = 0; b < n; b += 32) {
      const float* x = vals.data() + b;
      float amax = 0, big = 0;
      for (int i = 0; i < 32; ++i)
        if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), big = x[i];
      const float d = s.matrix_type == 8 ? amax / 127.0f : big / -8.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      const uint16_t h = f32_to_f16(d);
      data.push_back(uint8_t(h & 0xff)), data.push_back(uint8_t(h >> 8));
      if (s.matrix_type == 8) {
        for (int i = 0; i < 32; ++i) data.push_back(uint8_t(int8_t(std::nearbyint(x[i] * id))));
      } else {
        for (int i = 0; i < 16; ++i) {
          const int lo = std::min(15, int(x[i] * id + 8.5f)), hi = std::min(15, int(x[i + 16] * id + 8.5f));
          data.push_back(uint8_t(lo | (hi << 4)));
        }
      }
    }
  };
  add("token_embd.weight", {E, V}, s.tied ? s.output_scale : 1.0f);
  add("output_norm.weight", {E}, 0, true);
  if (!s.tied) add("output.weight", {E, V}, s.output_scale);
  if (s.rope_freqs) add("rope_freqs.weight", {D / 2}, 0, false, true);
  const uint64_t R = s.rope_dims ? uint64_t(s.rope_dims) : D;
  if (s.long_rope_after) {
    add("rope_factors_short.weight", {R / 2}, 0, true);       // near 1
    add("rope_factors_long.weight", {R / 2}, 0, false, true);  // 1 to 8
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (!olmo) {
      add(p + "attn_norm.weight", {E}, 0, true);
      add(p + (oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {E}, 0, true);
    }
    if (fused) {
      add(p + "attn_qkv.weight", {E, QW + 2 * KW}, 0.15f);
      if (glm) add(p + "attn_qkv.bias", {QW + 2 * KW}, 0.3f);
    } else {
      const bool phi = std::string(s.arch) == "phi3";  // the fused file's values, split
      add(p + "attn_q.weight", {E, QW}, 0.15f);
      add(p + "attn_k.weight", {E, KW}, 0.15f);
      add(p + "attn_v.weight", {E, KW}, phi ? 0.15f : 0.1f);
    }
    add(p + "attn_output.weight", {QW, E}, 0.1f);
    if (biases) {
      add(p + "attn_q.bias", {QW}, 0.5f);
      add(p + "attn_k.bias", {KW}, 0.5f);
      add(p + "attn_v.bias", {KW}, 0.2f);
    }
    if (qk_norm) {
      add(p + "attn_q_norm.weight", {D}, 0, true);
      add(p + "attn_k_norm.weight", {D}, 0, true);
    }
    if (olmo && s.arch_tensors) {
      add(p + "attn_q_norm.weight", {QW}, 0, true);
      add(p + "attn_k_norm.weight", {KW}, 0, true);
    }
    if (oss && s.arch_tensors) {
      add(p + "attn_output.bias", {E}, 0.1f);
      add(p + "attn_sinks.weight", {uint64_t(s.n_heads)}, 1.0f);
    }
    if (post_norms) {
      add(p + "post_attention_norm.weight", {E}, 0, true);
      add(p + "post_ffw_norm.weight", {E}, 0, true);
    }
    if (s.n_expert) {
      const uint64_t X = uint64_t(s.n_expert), FX = uint64_t(s.n_ff_exp);
      // Router logits a few units apart, so routing is neither uniform nor one-sided.
      add(p + "ffn_gate_inp.weight", {E, X}, 0.3f);
      add(p + "ffn_gate_exps.weight", {E, FX, X}, 0.1f);
      add(p + "ffn_up_exps.weight", {E, FX, X}, 0.1f);
      add(p + "ffn_down_exps.weight", {FX, E, X}, 0.15f);
      if (oss && s.arch_tensors) {
        add(p + "ffn_gate_inp.bias", {X}, 0.5f);
        add(p + "ffn_gate_exps.bias", {FX, X}, 0.2f);
        add(p + "ffn_up_exps.bias", {FX, X}, 0.2f);
        add(p + "ffn_down_exps.bias", {E, X}, 0.1f);
      }
    } else if (fused) {
      add(p + "ffn_up.weight", {E, 2 * F}, 0.1f);  // the gate's rows, then the up projection's
      add(p + "ffn_down.weight", {F, E}, 0.1f);
    } else {
      add(p + "ffn_gate.weight", {E, F}, 0.1f);
      add(p + "ffn_up.weight", {E, F}, 0.1f);
      add(p + "ffn_down.weight", {F, E}, 0.1f);
    }
  }
  w.data(data);
  return w.write(name);
}

}  // namespace cs::test
