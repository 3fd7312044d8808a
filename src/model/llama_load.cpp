// LlamaModel::load: the configuration from the GGUF keys, then the weights,
// each checked against the shape the configuration implies. What an
// architecture requires beyond Llama comes from its traits (model/arch.h).
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/arch.h"
#include "model/llama.h"

namespace cs {
namespace {

std::vector<float> load_vector(const GgufFile& f, const GgufTensor& t, int n) {
  if (t.n_elements != uint64_t(n))
    f.fail("tensor '" + t.name + "' has " + std::to_string(t.n_elements) + " values, expected " +
           std::to_string(n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t.type, t.data, out.data(), out.size());
  return out;
}

std::vector<float> load_vector(const GgufFile& f, const std::string& name, int n) {
  return load_vector(f, f.tensor(name), n);
}

// Empty when the file has no such tensor; an error when `required`.
std::vector<float> optional_vector(const GgufFile& f, const std::string& name, int n, bool required) {
  const GgufTensor* t = f.find_tensor(name);
  if (!t && required) f.fail("tensor '" + name + "' is missing (the architecture requires it)");
  return t ? load_vector(f, *t, n) : std::vector<float>{};
}

void check_shape(const GgufFile& f, const GgufTensor& t, int rows, int cols) {
  if (t.n_dims != 2 || t.ne[0] != cols || t.ne[1] != rows)
    f.fail("tensor '" + t.name + "' has shape [" + std::to_string(t.ne[0]) + ", " +
           std::to_string(t.ne[1]) + "], expected [" + std::to_string(cols) + ", " +
           std::to_string(rows) + "]");
  const TypeInfo info = *type_info(uint32_t(t.type));
  if (info.block_elems > 1 && cols % int(info.block_elems))
    f.fail("tensor '" + t.name + "' rows are not whole quantization blocks");
}

// Rows [first, first + rows) of a tensor whose rows are `cols` values of
// whole blocks (checked by the caller), packed by the backend as a matrix of
// its own: a fused projection's part (Phi-3) or a stacked tensor's expert.
Weight matrix_rows(const Backend& b, const GgufTensor& t, int64_t first, int rows, int cols) {
  const TypeInfo info = *type_info(uint32_t(t.type));
  const size_t row_bytes = size_t(cols / int(info.block_elems)) * size_t(info.block_bytes);
  return b.matrix(t.type, rows, cols, t.data + size_t(first) * row_bytes);
}

// A weight of shape [rows][cols] (GGUF ne = {cols, rows}), packed by the backend.
Weight load_matrix(const Backend& b, const GgufFile& f, const GgufTensor& t, int rows, int cols) {
  check_shape(f, t, rows, cols);
  return b.matrix(t.type, rows, cols, t.data);
}

// The n experts' [rows][cols] matrices of a stacked tensor (GGUF ne = {cols,
// rows, n}, each expert's rows after the previous one's), each packed by the
// backend as a matrix of its own.
std::vector<Weight> load_experts(const Backend& b, const GgufFile& f, const std::string& name, int n, int rows,
                                 int cols) {
  const GgufTensor& t = f.tensor(name);
  if (t.n_dims != 3 || t.ne[0] != cols || t.ne[1] != rows || t.ne[2] != n)
    f.fail("tensor '" + name + "' has shape [" + std::to_string(t.ne[0]) + ", " + std::to_string(t.ne[1]) + ", " +
           std::to_string(t.ne[2]) + "], expected [" + std::to_string(cols) + ", " + std::to_string(rows) + ", " +
           std::to_string(n) + "]");
  const TypeInfo info = *type_info(uint32_t(t.type));
  if (cols % info.block_elems) f.fail("tensor '" + name + "' rows are not whole quantization blocks");
  std::vector<Weight> out;
  for (int e = 0; e < n; ++e) out.push_back(matrix_rows(b, t, int64_t(e) * rows, rows, cols));
  return out;
}

int positive(const GgufFile& f, const std::string& key) {
  const uint64_t v = f.get_uint(key);
  if (v == 0 || v > (1u << 24)) f.fail("key '" + key + "' has implausible value " + std::to_string(v));
  return int(v);
}

// rope.scaling.type: none; linear (angles times 1 / factor); or yarn, as
// llama.cpp runs it for these architectures (RopeParams): the ramp between
// the pairs that turn 32 and 1 times over rope.scaling.original_context_length
// (the training context when absent), all of the original angle's share
// taken (ext_factor 1), and cos/sin scaled by (1 + 0.1 ln factor) times
// rope.scaling.attn_factor. (llama.cpp reads YaRN's beta, ext-factor and
// log-multiplier keys only for other architectures.) Without YaRN, cos/sin
// are still scaled by rope.scaling.attn_factor, as llama.cpp does: Phi-3's
// LongRoPE files carry it (sqrt(1 + ln(s) / ln(original context)), s the
// context's growth) with no scaling type; their factors are tensors
// (load_weights). A file that names another type is refused rather than
// approximated.
double rope_attn_factor(const GgufFile& f, const std::string& a) {
  const double attn = f.get_float(a + "rope.scaling.attn_factor", 1.0);
  if (!(attn > 0) || !std::isfinite(attn)) f.fail("rope.scaling.attn_factor must be positive");
  return attn;
}

int rope_original_context(const GgufFile& f, const std::string& a, int n_ctx_train) {
  const uint64_t orig = f.get_uint(a + "rope.scaling.original_context_length", uint64_t(n_ctx_train));
  if (orig == 0 || orig > (1u << 24)) f.fail("rope.scaling.original_context_length has implausible value " + std::to_string(orig));
  return int(orig);
}

void read_rope_scaling(const GgufFile& f, const std::string& a, int n_ctx_train, const ArchTraits& traits,
                       double attn, RopeParams& r) {
  r.mscale = attn;
  const std::string type = f.get_string(a + "rope.scaling.type", "none");
  if (type == "none") return;
  if (type != "linear" && type != "yarn")
    f.fail("RoPE scaling '" + type + "' is not supported (supported: none, linear, yarn)");
  const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
  if (!(factor > 0) || !std::isfinite(factor)) f.fail("rope.scaling.factor must be positive");
  r.freq_scale = 1.0 / factor;
  if (type == "linear") return;
  const int orig = rope_original_context(f, a, n_ctx_train);
  r.yarn = true;
  r.ext_factor = 1.0;
  // mistral3's files may move the ramp's ends (beta: the pairs that turn
  // beta_fast and beta_slow times) and divide the magnitude by
  // 1 + 0.1 m ln(factor), m the log-multiplier (mscale_all_dim).
  double beta_fast = 32.0, beta_slow = 1.0, log_mul = 0.0;
  if (traits.yarn_keys) {
    beta_fast = f.get_float(a + "rope.scaling.yarn_beta_fast", beta_fast);
    beta_slow = f.get_float(a + "rope.scaling.yarn_beta_slow", beta_slow);
    log_mul = f.get_float(a + "rope.scaling.yarn_log_multiplier", log_mul);
    if (!(beta_fast > 0) || !(beta_slow > 0) || !std::isfinite(beta_fast + beta_slow + log_mul))
      f.fail("the YaRN beta keys must be positive");
  }
  // The pair that turns n_rot times over the original context.
  auto pair_turning = [&](double n_rot) {
    return r.rot_dim * std::log(double(orig) / (n_rot * 2 * M_PI)) / (2 * std::log(r.base));
  };
  r.yarn_low = std::max(0.0, std::floor(pair_turning(beta_fast)));
  r.yarn_high = std::min(double(r.rot_dim - 1), std::ceil(pair_turning(beta_slow)));
  auto magnitude = [&](double m) { return factor <= 1.0 ? 1.0 : 1.0 + 0.1 * m * std::log(factor); };
  r.mscale = (log_mul != 0.0 ? magnitude(1.0) / magnitude(log_mul) : magnitude(1.0)) * attn;
}

// Sliding windows: attention.sliding_window positions on every layer but
// each swa_pattern-th (attention.sliding_window_pattern overrides the
// architecture's pattern; as an array, it says per layer whether the layer
// slides). Their RoPE: base rope_base_swa, unscaled; or, where that is 0,
// the global layers' own (rope.freq_base_swa may still set its base).
void read_windows(const GgufFile& f, const std::string& a, const ArchTraits& traits, double attn, LlamaConfig& c) {
  if (!traits.swa_pattern) return;
  const uint64_t window = f.get_uint(a + "attention.sliding_window", uint64_t(traits.default_window));
  if (window == 0) return;
  if (window > (1u << 24)) f.fail("attention.sliding_window has implausible value " + std::to_string(window));
  c.window.assign(size_t(c.n_layers), 0);
  const std::string pkey = a + "attention.sliding_window_pattern";
  if (f.has(pkey) && f.metadata().at(pkey).type == GgufType::ARRAY) {
    const std::vector<double>& slides = f.get_numbers(pkey);
    if (slides.size() != size_t(c.n_layers)) f.fail(pkey + " has " + std::to_string(slides.size()) + " values, expected one per layer");
    for (int l = 0; l < c.n_layers; ++l)
      if (slides[size_t(l)] != 0) c.window[size_t(l)] = int(window);
  } else {
    const uint64_t pattern = f.get_uint(pkey, uint64_t(traits.swa_pattern));
    if (pattern == 0) f.fail("attention.sliding_window_pattern must be positive");
    for (int l = 0; l < c.n_layers; ++l)
      if ((uint64_t(l) + 1) % pattern != 0) c.window[size_t(l)] = int(window);
  }
  c.rope_swa = c.rope;
  if (traits.rope_base_swa == 0.0) {
    c.rope_swa.base = f.get_float(a + "rope.freq_base_swa", c.rope.base);
    if (traits.swa_rope_unscaled) {
      c.rope_swa.freq_scale = 1.0;
      c.rope_swa.yarn = false;
      c.rope_swa.mscale = 1.0;
    }
    return;
  }
  c.rope_swa.base = traits.rope_base_swa;
  c.rope_swa.freq_scale = 1.0;
  c.rope_swa.yarn = false;
  c.rope_swa.mscale = attn;
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::load(const std::string& path, const Backend& backend) {
  std::unique_ptr<LlamaModel> m(new LlamaModel);
  m->backend_ = &backend;
  m->file_ = std::make_unique<GgufFile>(path);
  const ArchTraits& traits = m->load_config();
  m->tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*m->file_));
  try {
    m->chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_model(*m->tok_));
    if (m->chat_->is_fallback()) m->chat_note_ = "the model file has no chat template; using " + m->chat_->fallback_name();
  } catch (const jinja::TemplateError& e) {
    m->chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_model(*m->tok_, ChatTemplate::chatml_source()));
    m->chat_note_ = std::string("the model file's chat template does not compile (") + e.what() +
                    "); using ChatML (--chat-template FILE gives another)";
  }
  if (const std::string& tools = m->tok_->chat_template_tool_use(); !tools.empty()) {
    try {
      m->chat_tools_ = std::make_unique<ChatTemplate>(ChatTemplate::for_model(*m->tok_, tools));
    } catch (const jinja::TemplateError& e) {
      m->chat_note_ += std::string(m->chat_note_.empty() ? "" : "; ") +
                       "the model file's chat template for tools (tokenizer.chat_template.tool_use) does not compile (" +
                       e.what() + "); conversations with tools use the other";
    }
  }
  m->load_weights(traits);
  return m;
}

void LlamaModel::set_chat_template(const std::string& source) {
  chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_model(*tok_, source));
  chat_tools_.reset();
  chat_note_.clear();
}

void LlamaModel::set_context(int n_ctx) {
  LlamaConfig& c = cfg_;
  if (!c.long_rope()) return;
  c.rope.factors = c.long_factors_for(n_ctx) ? c.rope_long_factors : c.rope_short_factors;
}

const ArchTraits& LlamaModel::load_config() {
  const GgufFile& f = *file_;
  LlamaConfig& c = cfg_;
  c.arch = f.get_string("general.architecture");
  const ArchTraits* traits = find_arch(c.arch);
  if (!traits) f.fail("unsupported architecture '" + c.arch + "' (supported: " + supported_arch_names() + ")");
  const std::string a = c.arch + ".";
  if (f.get_uint(a + "expert_count", 0) > 0 && !traits->moe)
    f.fail("mixture-of-experts '" + c.arch + "' files are not supported");
  c.n_layers = positive(f, a + "block_count");
  c.n_embd = positive(f, a + "embedding_length");
  if (traits->moe) {
    c.n_expert = positive(f, a + "expert_count");
    c.n_expert_used = positive(f, a + "expert_used_count");
    if (c.n_expert_used > c.n_expert || c.n_expert_used > 64)
      f.fail("expert_used_count " + std::to_string(c.n_expert_used) + " is more than expert_count or 64");
    // The dense width, when the file gives one, is unused; without an expert
    // width, llama.cpp takes it as the dense one over the experts a token runs.
    c.n_ff = int(f.get_uint(a + "feed_forward_length", 0));
    c.n_ff_exp = f.has(a + "expert_feed_forward_length") ? positive(f, a + "expert_feed_forward_length")
                                                          : c.n_ff / c.n_expert_used;
    if (c.n_ff_exp <= 0) f.fail("key '" + a + "expert_feed_forward_length' is missing");
  } else {
    c.n_ff = positive(f, a + "feed_forward_length");
  }
  c.n_heads = positive(f, a + "attention.head_count");
  c.n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(f, a + "attention.head_count_kv") : c.n_heads;
  if (c.n_heads % c.n_kv_heads) f.fail("the query heads are not a multiple of the K/V heads");
  if (f.has(a + "attention.key_length")) {
    c.head_dim = positive(f, a + "attention.key_length");
    if (f.get_uint(a + "attention.value_length", uint64_t(c.head_dim)) != uint64_t(c.head_dim))
      f.fail("K and V heads of different widths are not supported");
  } else {
    if (c.n_embd % c.n_heads) f.fail("the heads do not divide the embedding width");
    c.head_dim = c.n_embd / c.n_heads;
  }
  // The attention kernels scale scores by 1/sqrt(head_dim); another scale
  // multiplies the queries first. Gemma 2 27B (46 layers) and Gemma 3 27B
  // (62) scale by 1/sqrt(n_embd / n_heads), a fact their GGUFs do not carry
  // (llama.cpp knows it by the layer count too).
  double scale = f.get_float(a + "attention.scale", 0.0);
  if (scale == 0.0 && ((c.arch == "gemma3" && c.n_layers == 62) || (c.arch == "gemma2" && c.n_layers == 46)))
    scale = 1.0 / std::sqrt(double(c.n_embd / c.n_heads));
  if (scale < 0.0 || !std::isfinite(scale)) f.fail("attention.scale must be positive");
  c.q_scale = scale == 0.0 ? 1.0f : float(scale * std::sqrt(double(c.head_dim)));
  c.rope.rot_dim = int(f.get_uint(a + "rope.dimension_count", uint64_t(c.head_dim)));
  if (c.rope.rot_dim > c.head_dim || c.rope.rot_dim % 2 || c.rope.rot_dim == 0)
    f.fail("invalid rope.dimension_count");
  c.rope.base = f.get_float(a + "rope.freq_base", 10000.0);
  c.rope.style = traits->rope;
  c.rms_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.n_ctx_train = int(f.get_uint(a + "context_length", 2048));
  const double attn = rope_attn_factor(f, a);
  read_rope_scaling(f, a, c.n_ctx_train, *traits, attn, c.rope);
  if (traits->yarn_keys) {
    c.attn_temp_scale = float(f.get_float(a + "attention.temperature_scale", 0.0));
    if (!std::isfinite(c.attn_temp_scale)) f.fail("attention.temperature_scale must be finite");
    if (c.attn_temp_scale != 0.0f) {
      // Its positions' unit: the original context, as llama.cpp takes it.
      c.attn_temp_floor = rope_original_context(f, a, c.n_ctx_train);
      if (c.rope.rot_dim != c.head_dim) f.fail("attention temperature with RoPE over part of each head is not supported");
    }
  }
  c.act = traits->act;
  c.no_rope_every = traits->no_rope_every;
  if (traits->granite_scales) {
    // llama.cpp's reading: a scale of 0 (or none) is not applied; logit_scale is required.
    auto scale_key = [&](const std::string& key, bool required) {
      if (required && !f.has(a + key)) f.fail("key '" + a + key + "' is missing (the architecture requires it)");
      const double v = f.get_float(a + key, 0.0);
      if (!std::isfinite(v) || v < 0) f.fail("key '" + a + key + "' must be a positive number");
      return v;
    };
    if (const double e = scale_key("embedding_scale", false); e != 0) c.embd_scale = float(e);
    if (const double r = scale_key("residual_scale", false); r != 0) c.residual_scale = float(r);
    const double logit = scale_key("logit_scale", true);
    if (logit == 0) f.fail("key '" + a + "logit_scale' must be a positive number");
    c.logit_mul = 1.0f / float(logit);
  }
  if (traits->softcaps) {
    auto cap = [&](const std::string& key, double def) {
      const double v = f.get_float(a + key, def);
      if (!(v > 0) || !std::isfinite(v)) f.fail("key '" + a + key + "' must be a positive number");
      return float(v);
    };
    c.attn_softcap = cap("attn_logit_softcapping", 50.0);
    c.final_softcap = cap("final_logit_softcapping", 30.0);
  }
  if (traits->glm_keys) {
    if (f.has(a + "rope.dimension_sections"))
      for (double s : f.get_numbers(a + "rope.dimension_sections"))
        if (s != 0) f.fail("M-RoPE (rope.dimension_sections, GLM-4's vision models) is not supported");
    if (f.get_uint(a + "nextn_predict_layers", 0) > 0)
      f.fail("multi-token prediction layers (nextn_predict_layers) are not supported");
  }
  c.gating = traits->gating;
  if (traits->scale_embd) c.embd_scale = std::sqrt(float(c.n_embd));
  read_windows(f, a, *traits, attn, c);
  return *traits;
}

void LlamaModel::load_weights(const ArchTraits& traits) {
  const GgufFile& f = *file_;
  LlamaConfig& c = cfg_;
  const GgufTensor& emb = f.tensor("token_embd.weight");
  c.n_vocab = int(emb.ne[1]);
  if (c.n_vocab != tok_->vocab_size())
    f.fail("token_embd.weight has " + std::to_string(c.n_vocab) + " rows but the vocabulary has " +
           std::to_string(tok_->vocab_size()) + " tokens");
  check_shape(f, emb, c.n_vocab, c.n_embd);
  // The embedding is only looked up by row: used as the file has it.
  const Backend& b = *backend_;
  tok_embd_ = b.table(emb.type, c.n_vocab, c.n_embd, emb.data);
  // Tied embeddings (Llama 3.2, Qwen 2.5 small, SmolLM2): no output.weight,
  // the head multiplies by the embedding.
  const GgufTensor* out = f.find_tensor("output.weight");
  c.tied_embeddings = out == nullptr;
  output_ = load_matrix(b, f, out ? *out : emb, c.n_vocab, c.n_embd);
  output_norm_ = load_vector(f, "output_norm.weight", c.n_embd);
  // Llama 3.x's long-context RoPE: per-pair frequency divisors.
  c.rope.factors = optional_vector(f, "rope_freqs.weight", c.rope.rot_dim / 2, false);
  // Phi-3's LongRoPE: a short and a long set of them, chosen by the context
  // (set_context; here for the trained context, the engine's default).
  const bool has_short = f.find_tensor("rope_factors_short.weight") != nullptr;
  const bool has_long = f.find_tensor("rope_factors_long.weight") != nullptr;
  if (has_short != has_long) f.fail("the file has only one of rope_factors_short and rope_factors_long");
  if (has_long) {
    if (!c.rope.factors.empty()) f.fail("the file has both rope_freqs and LongRoPE's factors");
    c.rope_short_factors = load_vector(f, "rope_factors_short.weight", c.rope.rot_dim / 2);
    c.rope_long_factors = load_vector(f, "rope_factors_long.weight", c.rope.rot_dim / 2);
    c.rope_long_after = rope_original_context(f, c.arch + ".", c.n_ctx_train);
    set_context(c.n_ctx_train);
  }

  const int E = c.n_embd, QW = c.q_width(), KW = c.kv_width();
  auto matrix = [&](const std::string& name, int rows, int cols) { return load_matrix(b, f, f.tensor(name), rows, cols); };
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayer L;
    if (traits.pre_norms) {
      L.attn_norm = load_vector(f, p + "attn_norm.weight", E);
      L.ffn_norm = load_vector(f, p + std::string(traits.ffn_norm) + ".weight", E);
    }
    // Post-norms are Gemma's, OLMo 2's and GLM-4's (gpt-oss's post_attention_norm is its FFN norm).
    if (traits.post_norms) L.attn_post_norm = optional_vector(f, p + "post_attention_norm.weight", E, true);
    L.ffn_post_norm = optional_vector(f, p + "post_ffw_norm.weight", E, traits.post_norms);
    // Phi-3's fused projection (attn_qkv): the queries' rows, then the
    // keys', then the values', each part packed as a matrix of its own.
    const GgufTensor* qkv = f.find_tensor(p + "attn_qkv.weight");
    if (qkv) {
      check_shape(f, *qkv, QW + 2 * KW, E);
      L.wq = matrix_rows(b, *qkv, 0, QW, E);
      L.wk = matrix_rows(b, *qkv, QW, KW, E);
      L.wv = matrix_rows(b, *qkv, QW + KW, KW, E);
    } else {
      L.wq = matrix(p + "attn_q.weight", QW, E);
      L.wk = matrix(p + "attn_k.weight", KW, E);
      L.wv = matrix(p + "attn_v.weight", KW, E);
    }
    L.wo = matrix(p + "attn_output.weight", E, QW);
    if (c.moe()) {
      L.router = matrix(p + "ffn_gate_inp.weight", c.n_expert, E);
      L.exp_gate = load_experts(b, f, p + "ffn_gate_exps.weight", c.n_expert, c.n_ff_exp, E);
      L.exp_up = load_experts(b, f, p + "ffn_up_exps.weight", c.n_expert, c.n_ff_exp, E);
      L.exp_down = load_experts(b, f, p + "ffn_down_exps.weight", c.n_expert, E, c.n_ff_exp);
      // gpt-oss: the router's bias (per expert) and each expert's biases,
      // stacked as their matrices are (expert e's after e - 1's).
      const bool need = traits.moe_biases;
      L.router_b = optional_vector(f, p + "ffn_gate_inp.bias", c.n_expert, need);
      L.exp_gate_b = optional_vector(f, p + "ffn_gate_exps.bias", c.n_expert * c.n_ff_exp, need);
      L.exp_up_b = optional_vector(f, p + "ffn_up_exps.bias", c.n_expert * c.n_ff_exp, need);
      L.exp_down_b = optional_vector(f, p + "ffn_down_exps.bias", c.n_expert * E, need);
    } else if (traits.fused_gate_up && !f.find_tensor(p + "ffn_gate.weight")) {
      // The gate's rows first (SwiGLU's silu side), then the up projection's.
      const GgufTensor& up = f.tensor(p + "ffn_up.weight");
      check_shape(f, up, 2 * c.n_ff, E);
      L.w_gate = matrix_rows(b, up, 0, c.n_ff, E);
      L.w_up = matrix_rows(b, up, c.n_ff, c.n_ff, E);
      L.w_down = matrix(p + "ffn_down.weight", E, c.n_ff);
    } else {
      L.w_gate = matrix(p + "ffn_gate.weight", c.n_ff, E);
      L.w_up = matrix(p + "ffn_up.weight", c.n_ff, E);
      L.w_down = matrix(p + "ffn_down.weight", E, c.n_ff);
    }
    if (qkv && f.find_tensor(p + "attn_qkv.bias")) {
      const std::vector<float> bias = load_vector(f, p + "attn_qkv.bias", QW + 2 * KW);
      L.bq.assign(bias.begin(), bias.begin() + QW);
      L.bk.assign(bias.begin() + QW, bias.begin() + QW + KW);
      L.bv.assign(bias.begin() + QW + KW, bias.end());
    } else {
      L.bq = optional_vector(f, p + "attn_q.bias", QW, traits.qkv_bias);
      L.bk = optional_vector(f, p + "attn_k.bias", KW, traits.qkv_bias);
      L.bv = optional_vector(f, p + "attn_v.bias", KW, traits.qkv_bias);
    }
    L.bo = optional_vector(f, p + "attn_output.bias", E, traits.moe_biases);
    L.sinks = optional_vector(f, p + "attn_sinks.weight", c.n_heads, traits.sinks);
    L.q_norm = optional_vector(f, p + "attn_q_norm.weight", traits.qk_norm_full ? QW : c.head_dim, traits.qk_norm);
    L.k_norm = optional_vector(f, p + "attn_k_norm.weight", traits.qk_norm_full ? KW : c.head_dim, traits.qk_norm);
    if (L.q_norm.empty() != L.k_norm.empty()) f.fail("layer " + std::to_string(l) + " has only one of the Q/K norms");
    layers_.push_back(std::move(L));
  }
}

}  // namespace cs
