#include "model/arch.h"

#include <array>

namespace cs {
namespace {

// Llama covers Llama 1-3.x, Mistral and SmolLM files (arch "llama"); Llama
// 3's frequency factors and tied embeddings are tensors, not traits.
constexpr std::array kArchs = {
    ArchTraits{"llama", RopeStyle::kAdjacent, false, false},
    ArchTraits{"qwen2", RopeStyle::kHalves, true, false},
    ArchTraits{"qwen3", RopeStyle::kHalves, false, true},
    ArchTraits{"gemma3", RopeStyle::kHalves, false, true, true, true, FfnAct::kGeluTanh, 6, 10000.0},
    // Gemma 2: Gemma 3's block without Q/K norms, every other layer sliding
    // (with the global RoPE, rope.freq_base_swa aside), scores and logits
    // soft-capped.
    ArchTraits{.name = "gemma2", .rope = RopeStyle::kHalves, .post_norms = true, .scale_embd = true,
               .act = FfnAct::kGeluTanh, .swa_pattern = 2, .rope_base_swa = 0.0, .softcaps = true,
               .default_window = 4096},
    ArchTraits{"qwen3moe", RopeStyle::kHalves, false, true, false, false, FfnAct::kSilu, 0, 10000.0, true},
    // gpt-oss: sliding windows on even layers (0-based), with the global RoPE
    // (YaRN); Q/K/V biases where the file has them (its converter writes them).
    ArchTraits{.name = "gpt-oss", .rope = RopeStyle::kHalves, .act = FfnAct::kSwigluOai, .swa_pattern = 2,
               .rope_base_swa = 0.0, .moe = true, .gating = MoeGating::kSoftmaxChosen, .sinks = true,
               .moe_biases = true, .ffn_norm = "post_attention_norm"},
    // OLMo 2 and OLMo 3 (arch "olmo2"): no pre-norms, post-norms on each
    // block's output, Q/K norms over the whole projection, RoPE by halves;
    // OLMo 3's files slide on 3 of every 4 layers, unscaled there.
    ArchTraits{.name = "olmo2", .rope = RopeStyle::kHalves, .qk_norm = true, .post_norms = true, .swa_pattern = 4,
               .rope_base_swa = 0.0, .pre_norms = false, .qk_norm_full = true, .swa_rope_unscaled = true},
    // GLM-4 (GLM-4-9B/32B-0414, GLM-Z1; arch "glm4"): Llama's block with
    // post-norms on both outputs, Phi-3's fused gate/up (and a fused
    // attn_qkv where the file has one), RoPE on adjacent pairs over part of
    // each head.
    ArchTraits{.name = "glm4", .rope = RopeStyle::kAdjacent, .post_norms = true, .fused_gate_up = true,
               .glm_keys = true},
    // Phi-3, Phi-3.5 and Phi-4 (arch "phi3"): fused Q/K/V and gate/up
    // projections, RoPE by halves (over the first rope.dimension_count
    // dimensions: Phi-4-mini turns 3/4 of each head), LongRoPE's factors
    // where the file has them. llama.cpp leaves the files' sliding window
    // unused, and so do we (no swa_pattern).
    ArchTraits{.name = "phi3", .rope = RopeStyle::kHalves, .fused_gate_up = true},
    // Ministral 3, and Mistral Small 3.1/3.2 as llama.cpp's converter writes
    // them now (arch "mistral3"): Llama's layers, YaRN with its beta and
    // log-multiplier keys, queries tempered by position (Llama 4's rule).
    ArchTraits{.name = "mistral3", .rope = RopeStyle::kAdjacent, .yarn_keys = true},
    // SmolLM3: Llama's layers, every 4th without RoPE (as llama.cpp runs it).
    ArchTraits{.name = "smollm3", .rope = RopeStyle::kAdjacent, .no_rope_every = 4},
    // Granite 3.x (dense): Llama's layers with its four multipliers (the
    // attention's is attention.scale, read for every architecture).
    ArchTraits{.name = "granite", .rope = RopeStyle::kAdjacent, .granite_scales = true},
};

}  // namespace

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

std::string supported_arch_names() {
  std::string out;
  for (const ArchTraits& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

}  // namespace cs
