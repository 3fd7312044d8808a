// What a GGUF file holds, for humans (`chunkserve info MODEL`): what gguf-dump
// shows, summed up, and whether chunkserve runs it. Read from the header and
// keys, so a file we cannot run is still described, with the reasons; a file
// with none is then loaded, for the loader's own checks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cs {

struct LlamaConfig;

struct TypeUse {
  std::string type;  // ggml's name: "Q4_K", "IQ2_XS", ...
  int tensors = 0;
  uint64_t params = 0;
  uint64_t bytes = 0;  // 0 for a type we do not read
  bool supported = true;
};

struct ModelInfo {
  std::string path, name, arch;
  uint64_t file_bytes = 0, params = 0;
  std::vector<TypeUse> types;  // most parameters first
  int n_layers = 0, n_embd = 0, n_ff = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int n_ctx_train = 0, n_vocab = 0;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;  // a mixture of experts (0: dense)
  bool tied_embeddings = false;
  std::string tokenizer, pre;     // tokenizer.ggml.model and .pre
  std::string template_line;      // the chat template's first line ("" when none)
  std::string template_fallback;  // without one: the built-in template used (when it loads)
  std::string tool_template_line;  // tokenizer.chat_template.tool_use's first line ("" when none)
  std::string template_source, tool_template_source;  // both whole (the server reads tool formats from them)
  int window = 0, sliding_layers = 0;  // sliding-window attention (Gemma 3), when it loads
  float attn_softcap = 0, final_softcap = 0;  // Gemma 2's soft-capping of scores and logits, when it loads
  std::string rope;                    // how positions turn Q and K, when it loads (rope_description)
  uint64_t kv_bytes_per_token = 0;  // K and V of every layer, fp16 (the cache's default)
  std::vector<std::string> problems;  // empty: chunkserve runs the file
};

// Throws cs::Error for a file that is not a readable GGUF at all.
ModelInfo describe_model(const std::string& path);

// One line on a loaded model's RoPE: base, the dimensions turned, scaling,
// and what depends on the context or the layer (LongRoPE's factor sets,
// NoPE layers, tempered queries).
std::string rope_description(const LlamaConfig& c);

// The description as aligned text lines.
std::string format_model_info(const ModelInfo& m);

}  // namespace cs
