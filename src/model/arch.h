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

struct ArchTraits {
  std::string_view name;
  RopeStyle rope = RopeStyle::kAdjacent;
  bool qkv_bias = false;  // attn_{q,k,v}.bias required (Qwen 2); optional elsewhere
  bool qk_norm = false;   // attn_{q,k}_norm.weight: an RMSNorm over each head before RoPE (Qwen 3)
};

// nullptr for an architecture we do not run.
const ArchTraits* find_arch(std::string_view name);

// "llama, qwen2, qwen3", for errors and `chunkserve info`.
std::string supported_arch_names();

}  // namespace cs
