#include "model/model_info.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "attn/block.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/pre_tokenizer.h"

namespace cs {
namespace {

std::vector<TypeUse> type_mix(const GgufFile& f) {
  std::map<std::string, TypeUse> by_type;
  for (const GgufTensor& t : f.tensors()) {
    std::string name = type_name(uint32_t(t.type));
    if (name.empty()) name = "type " + std::to_string(uint32_t(t.type));
    TypeUse& u = by_type[name];
    u.type = name;
    u.tensors += 1;
    u.params += t.n_elements;
    u.bytes += t.n_bytes;
    u.supported = t.supported;
  }
  std::vector<TypeUse> out;
  for (auto& [n, u] : by_type) out.push_back(u);
  std::sort(out.begin(), out.end(), [](const TypeUse& a, const TypeUse& b) { return a.params > b.params; });
  return out;
}

void read_shape(const GgufFile& f, ModelInfo& m) {
  const std::string a = m.arch + ".";
  m.n_layers = int(f.get_uint(a + "block_count", 0));
  m.n_embd = int(f.get_uint(a + "embedding_length", 0));
  m.n_ff = int(f.get_uint(a + "feed_forward_length", 0));
  m.n_heads = int(f.get_uint(a + "attention.head_count", 0));
  m.n_kv_heads = int(f.get_uint(a + "attention.head_count_kv", uint64_t(m.n_heads)));
  m.head_dim = int(f.get_uint(a + "attention.key_length", m.n_heads ? uint64_t(m.n_embd / m.n_heads) : 0));
  m.n_ctx_train = int(f.get_uint(a + "context_length", 0));
  m.n_expert = int(f.get_uint(a + "expert_count", 0));
  m.n_expert_used = int(f.get_uint(a + "expert_used_count", 0));
  m.n_ff_exp = int(f.get_uint(a + "expert_feed_forward_length", 0));
  m.kv_bytes_per_token = 2ull * uint64_t(m.n_layers) * uint64_t(m.n_kv_heads) * uint64_t(m.head_dim) * 2;
}

void read_tokenizer(const GgufFile& f, ModelInfo& m) {
  m.tokenizer = f.get_string("tokenizer.ggml.model", "");
  m.pre = f.get_string("tokenizer.ggml.pre", "");
  if (f.has("tokenizer.ggml.tokens")) m.n_vocab = int(f.get_strings("tokenizer.ggml.tokens").size());
  const std::string tmpl = f.get_string("tokenizer.chat_template", "");
  m.template_line = tmpl.substr(0, tmpl.find('\n'));
  if (m.template_line.size() > 100) m.template_line = m.template_line.substr(0, 100) + "...";
  const std::string tools = f.get_string("tokenizer.chat_template.tool_use", "");
  m.template_source = tmpl;
  m.tool_template_source = tools;
  m.tool_template_line = tools.substr(0, tools.find('\n'));
  if (m.tool_template_line.size() > 100) m.tool_template_line = m.tool_template_line.substr(0, 100) + "...";
}

// The reasons the loader would give, found without loading.
void find_problems(ModelInfo& m) {
  if (!find_arch(m.arch))
    m.problems.push_back("architecture '" + m.arch + "' is not supported (supported: " + supported_arch_names() + ")");
  for (const TypeUse& u : m.types)
    if (!u.supported)
      m.problems.push_back(std::to_string(u.tensors) + (u.tensors == 1 ? " tensor" : " tensors") + " of type " +
                           u.type + ", which chunkserve does not read");
  if (m.tokenizer != "gpt2" && m.tokenizer != "llama")
    m.problems.push_back("tokenizer '" + m.tokenizer + "' is not supported (supported: gpt2, llama)");
  else if (m.tokenizer == "gpt2" && !pre_tokenizer(m.pre))
    m.problems.push_back("pre-tokenizer '" + m.pre + "' is not supported");
  if (!block_head_dim(m.head_dim))
    m.problems.push_back("head dimension " + std::to_string(m.head_dim) + " (the chunk cache runs " + kBlockHeadDims + ")");
}

std::string human_bytes(uint64_t b) {
  char s[32];
  if (b >= (1ull << 30)) std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(s, sizeof s, "%.1f MiB", double(b) / double(1ull << 20));
  else std::snprintf(s, sizeof s, "%.1f KiB", double(b) / 1024.0);
  return s;
}

std::string human_ratio(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", x);
  return s;
}

std::string human_count(uint64_t n) {
  char s[32];
  if (n >= 1000000000ull) std::snprintf(s, sizeof s, "%.2fB", double(n) / 1e9);
  else std::snprintf(s, sizeof s, "%.1fM", double(n) / 1e6);
  return s;
}

}  // namespace

ModelInfo describe_model(const std::string& path) {
  const GgufFile f(path, GgufOpen::kDescribe);
  ModelInfo m;
  m.path = path;
  m.file_bytes = f.mapped().size();
  m.name = f.get_string("general.name", "");
  m.arch = f.get_string("general.architecture", "");
  m.types = type_mix(f);
  for (const TypeUse& u : m.types) m.params += u.params;
  m.tied_embeddings = f.find_tensor("token_embd.weight") && !f.find_tensor("output.weight");
  read_shape(f, m);
  read_tokenizer(f, m);
  find_problems(m);
  // What only the loader checks (every tensor present with its shape, RoPE
  // scaling, ...): load it, when nothing above already rules it out.
  if (m.problems.empty()) {
    try {
      const auto model = LlamaModel::load(path);
      m.template_fallback = model->chat().fallback_name();
      for (int l = 0; l < model->config().n_layers; ++l)
        if (const int w = model->config().window_of(l)) m.window = w, ++m.sliding_layers;
      m.rope = rope_description(model->config());
      m.attn_softcap = model->config().attn_softcap;
      m.final_softcap = model->config().final_softcap;
    } catch (const Error& e) {
      m.problems.push_back(e.what());
    }
  }
  return m;
}

std::string rope_description(const LlamaConfig& c) {
  const RopeParams& r = c.rope;
  char base[32];
  std::snprintf(base, sizeof base, r.base == std::floor(r.base) && r.base < 1e15 ? "%.0f" : "%g", r.base);
  std::string o = std::string("base ") + base + ", " + (r.style == RopeStyle::kAdjacent ? "adjacent" : "half-apart") +
                  " pairs, " + (r.rot_dim == c.head_dim ? "all " + std::to_string(r.rot_dim)
                                                        : std::to_string(r.rot_dim) + " of " + std::to_string(c.head_dim)) +
                  " dims";
  if (r.yarn) o += ", YaRN x" + human_ratio(1.0 / r.freq_scale);
  else if (r.freq_scale != 1.0) o += ", linear x" + human_ratio(1.0 / r.freq_scale);
  if (c.long_rope())
    o += ", LongRoPE: short factors up to " + std::to_string(c.rope_long_after) +
         " positions of context, long ones beyond (--ctx decides; the trained context turns with the " +
         (c.uses_long_factors() ? "long" : "short") + " ones)";
  else if (!r.factors.empty()) o += ", frequency factors";
  if (c.no_rope_every) o += ", every " + std::to_string(c.no_rope_every) + "th layer none (NoPE)";
  if (c.attn_temp_scale != 0.0f)
    o += ", queries tempered past " + std::to_string(c.attn_temp_floor) + " positions";
  return o;
}

std::string format_model_info(const ModelInfo& m) {
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) { o += k + std::string(k.size() < 15 ? 15 - k.size() : 1, ' ') + v + "\n"; };
  line("file", m.path + " (" + human_bytes(m.file_bytes) + ")");
  if (!m.name.empty()) line("name", m.name);
  line("architecture", m.arch + (find_arch(m.arch) ? "" : " (not supported)"));
  line("parameters", human_count(m.params) + " (" + std::to_string(m.params) + ")");
  line("layers", std::to_string(m.n_layers) + ", width " + std::to_string(m.n_embd) +
                    (m.n_expert ? ", " + std::to_string(m.n_expert) + " experts of " + std::to_string(m.n_ff_exp) + ", " +
                                      std::to_string(m.n_expert_used) + " per token"
                                : ", FFN " + std::to_string(m.n_ff)));
  line("attention", std::to_string(m.n_heads) + " heads, " + std::to_string(m.n_kv_heads) + " K/V heads, head dim " +
                        std::to_string(m.head_dim) +
                        (m.window ? "; " + std::to_string(m.sliding_layers) + " of " + std::to_string(m.n_layers) +
                                        " layers slide over " + std::to_string(m.window) + " positions"
                                  : "") +
                        (m.attn_softcap != 0 ? "; scores soft-capped at " + human_ratio(m.attn_softcap) + " (c tanh(s / c))"
                                             : ""));
  if (m.final_softcap != 0) line("logits", "soft-capped at " + human_ratio(m.final_softcap));
  line("context", std::to_string(m.n_ctx_train) + " tokens (trained)");
  if (!m.rope.empty()) line("RoPE", m.rope);
  line("embeddings", m.tied_embeddings ? "tied (the output head is the token embedding)" : "separate output head");
  line("vocabulary", std::to_string(m.n_vocab) + " tokens, " + m.tokenizer + (m.pre.empty() ? "" : ", pre-tokenizer " + m.pre));
  line("chat template", !m.template_line.empty() ? m.template_line
                        : "(none: " + (m.template_fallback.empty() ? std::string("ChatML") : m.template_fallback) +
                              " is used)");
  if (!m.tool_template_line.empty())
    line("tool template", m.tool_template_line + " (tokenizer.chat_template.tool_use: conversations with tools)");
  line("KV cache", human_bytes(m.kv_bytes_per_token) + " per token (fp16)");
  o += "tensor types\n";
  for (const TypeUse& u : m.types) {
    char row[160];
    std::snprintf(row, sizeof row, "  %-8s %4d tensors %9s params  %s%s\n", u.type.c_str(), u.tensors,
                  human_count(u.params).c_str(), u.supported ? human_bytes(u.bytes).c_str() : "-",
                  u.supported ? "" : "  (not supported)");
    o += row;
  }
  if (m.problems.empty()) {
    line("runs", "yes");
  } else {
    line("runs", "no:");
    for (const std::string& p : m.problems) o += "  - " + p + "\n";
  }
  return o;
}

}  // namespace cs
