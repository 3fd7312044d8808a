#include "grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <sstream>
#include <unordered_map>
#include <variant>

#include "base/threads.h"
#include "base/utf8.h"
#include "grammar/compile_process.h"
#include "grammar/limits.h"
#include "grammar/messages.h"
#include "grammar/schema_check.h"
#include "grammar/xml_kind.h"
#include "model/tokenizer.h"

namespace cs {

struct GrammarVocab::Impl {
  // Budgeted compiles (Grammar::compile with a ProcessBudget): their results
  // by spec, least recently used out beyond kCacheEntries or kCacheBytes.
  struct Cached {
    std::shared_ptr<const Grammar> grammar;
    size_t bytes = 0;
    uint64_t tick = 0;
  };
  std::mutex cache_mu;
  std::unordered_map<std::string, Cached> cache;
  uint64_t cache_tick = 0;
  size_t cache_bytes = 0;
  // Budgeted compiles that failed for the constraint's own sake (it does
  // not compile, or not within the budget): by spec and budget, the latest
  // kFailedEntries. The same constraint under the same budget fails the same
  // way, so it is answered from here, not compiled again: a client that
  // repeats a constraint costing seconds of CPU to refuse (or an agent
  // whose optional call grammar is over budget, tried again each turn)
  // costs the server those seconds once.
  struct Failed {
    std::string message;
    GrammarFailure why;
    uint64_t tick = 0;
  };
  std::unordered_map<std::string, Failed> failed;
  // Tokens that hold no control byte (below 0x20): JSON allows none outside
  // escapes, but xgrammar's JSON strings take them raw, and strict parsers
  // (Python's json, Pydantic) refuse the result. JSON masks keep only these
  // (and the end-of-generation tokens).
  std::vector<uint32_t> json_safe;
  xgrammar::TokenizerInfo info;
  // One thread: compiling runs on a request's worker thread, which is the
  // parallelism; the engine's own threads stay free for the forward pass.
  xgrammar::GrammarCompiler compiler;
  Impl(const std::vector<std::string>& vocab, xgrammar::VocabType type, std::vector<int32_t> stops)
      : info(vocab, type, std::nullopt, std::move(stops), false), compiler(info, 1, true, 64ll << 20) {}
};

namespace {

// The vocabulary as xgrammar reads it: each token's stored text (byte-level
// BPE's symbols, SentencePiece's pieces), except that control, unknown and
// unused tokens are empty, which xgrammar takes as never allowed: a grammar
// matches text, and those tokens are no text. Markup a reply writes as text
// (Tokenizer::renders_markup: harmony's <|channel|>, ...) is text to a
// grammar too, so a tool call's header is spelled the way the model was
// trained to write it.
std::vector<std::string> engine_vocab(const Tokenizer& tok) {
  std::vector<std::string> out(size_t(tok.vocab_size()));
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    const TokenType t = tok.type(i);
    const bool text = t == TokenType::kControl ? tok.renders_markup(i) : t != TokenType::kUnknown && t != TokenType::kUnused;
    if (text) out[size_t(i)] = tok.token(i);
  }
  return out;
}

// An EBNF string literal of s.
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

xgrammar::Grammar json_schema_grammar(const std::string& schema) {
  return xgrammar::Grammar::FromJSONSchema(schema, false, std::nullopt, std::make_pair(",", ":"), true);
}

xgrammar::Grammar literal_grammar(const std::string& s) { return xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(s)); }

// Every `from` in text replaced by `to`.
void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
}

// s as xgrammar prints it inside an EBNF string: '"', '\\' and the usual
// control characters escaped by a backslash, other bytes below 0x20 and
// characters from 0x7f as \\xHH, \\uHHHH or \\UHHHHHHHH.
std::string printed_text(std::string_view s) {
  std::string out;
  char hex[16];
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len(s, i);
    const uint32_t c = utf8_decode(s, i, n);
    i += n;
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c >= 0x20 && c < 0x7f) out += char(c);
    else {
      std::snprintf(hex, sizeof hex, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", unsigned(c));
      out += hex;
    }
  }
  return out;
}

// DeepSeek's markup prefix in its XML tags (full-width bars, as text).
constexpr std::string_view kDsml = "<\uff5cDSML\uff5c";

// A schema's object as XML elements (JsonFrame::style). xgrammar's rules
// allow any whitespace around each element and each non-string value, which
// a small model pads without end (as it would JSON's): at most one newline
// there, as the templates write them (">\n42\n</parameter>\n"). GLM's
// elements are the same rules with other tags: the printed rules' tags
// replaced (">" is no JSON token, so the only literal ">" is a key's end).
xgrammar::Grammar xml_parameters_grammar(const nlohmann::ordered_json& schema, JsonFrame::Style style) {
  const nlohmann::ordered_json tag = {{"type", "structural_tag"}, {"format", {{"type", "qwen_xml_parameter"}, {"json_schema", schema}}}};
  auto g = xgrammar::Grammar::FromStructuralTag(tag.dump());
  if (!std::holds_alternative<xgrammar::Grammar>(g)) {
    std::string why = "the schema cannot be written as XML parameters";
    std::visit([&](const auto& e) { why += std::string(": ") + e.what(); }, std::get<xgrammar::StructuralTagError>(g));
    throw GrammarError(why);
  }
  std::string ebnf = std::get<xgrammar::Grammar>(g).ToString();
  replace_all(ebnf, "[ \\n\\r\\t]*", "[\\n]?");
  // A string of bounded length is any characters, so its value could hold
  // its own closing tag ("</parameter>") and be read back cut there: no '<'
  // in one (a plain string's rule keeps out just the closing tag).
  replace_all(ebnf, "[\\0-\\U0010ffff]", "[^<]");
  if (style == JsonFrame::Style::kArgKeys) {
    replace_all(ebnf, "\"<parameter=", "\"<arg_key>");
    replace_all(ebnf, " \">\" ", " \"</arg_key>\" [\\n]? \"<arg_value>\" ");
    replace_all(ebnf, "\"</parameter>\"", "\"</arg_value>\"");
  } else if (style == JsonFrame::Style::kInvoke) {
    replace_all(ebnf, "\"<parameter=", "\"<parameter name=\\\"");
    replace_all(ebnf, " \">\" ", " \"\\\">\" ");
  } else if (style == JsonFrame::Style::kDsml) {
    // Each declared parameter's tag says whether its value is text, by its
    // kind; a key printed otherwise than printed_text spells it, and the
    // keys of additional properties, may say either.
    const std::string tag = std::string("\"") + std::string(kDsml) + "parameter name=\\\"";
    if (schema.is_object() && schema.contains("properties") && schema["properties"].is_object())
      for (const auto& [key, sub] : schema["properties"].items()) {
        const std::string kind = xml_value_kind(sub), name = printed_text(key);
        std::string from = "\"<parameter=", to = tag;
        from.append(name).append("\" \">\" ");
        to.append(name).append("\\\" string=\\\"").append(kind == "string" || kind == "text" ? "true" : "false");
        to.append("\\\">\" ");
        replace_all(ebnf, from, to);
      }
    replace_all(ebnf, "\"<parameter=", tag);
    replace_all(ebnf, " \">\" ", " \"\\\" string=\\\"\" (\"true\" | \"false\") \"\\\">\" ");
    std::string close = "\"</";
    close.append(kDsml.substr(1)).append("parameter>\"");
    replace_all(ebnf, "\"</parameter>\"", close);
  }
  return xgrammar::Grammar::FromEBNF(ebnf, "root");
}

xgrammar::Grammar framed(const xgrammar::Grammar& json, const JsonFrame& f);

// Per-case frames (JsonFrame::case_before): open, then items (at most
// max_items, joined by `between`), each any of the cases' before + schema +
// after, then close; the schemas' grammars joined by the engine (Concat,
// Union), so their rules never collide.
xgrammar::Grammar framed_cases(const std::string& schemas, const JsonFrame& f) {
  // Ordered: a schema's properties are written in the order it gives them.
  const nlohmann::ordered_json list = nlohmann::ordered_json::parse(schemas);
  std::vector<xgrammar::Grammar> cases;
  for (size_t i = 0; i < list.size(); ++i) {
    std::vector<xgrammar::Grammar> parts;
    if (!f.case_before[i].empty()) parts.push_back(literal_grammar(f.case_before[i]));
    if (!f.numbered.empty()) {
      parts.push_back(xgrammar::Grammar::FromEBNF("root ::= [0-9] [0-9]{0,5}"));
      parts.push_back(literal_grammar(f.numbered));
    }
    parts.push_back(f.style != JsonFrame::Style::kJson ? xml_parameters_grammar(list[i], f.style)
                                                       : json_schema_grammar(list[i].dump()));
    if (!f.after.empty()) parts.push_back(literal_grammar(f.after));
    cases.push_back(xgrammar::Grammar::Concat(parts));
  }
  const xgrammar::Grammar item = cases.size() == 1 ? cases[0] : xgrammar::Grammar::Union(cases);
  JsonFrame around;
  around.open = f.open;
  around.close = f.close;
  around.between = f.between;
  around.max_items = f.max_items;
  return framed(item, around);
}

// OpenAI's json_object: any object, compact like a schema's.
constexpr const char* kAnyObject = R"({"type": "object"})";

// The JSON's grammar (its rules printed as EBNF, its own rule renamed by
// xgrammar when another is the root) under a root that frames it.
xgrammar::Grammar framed(const xgrammar::Grammar& json, const JsonFrame& f) {
  std::ostringstream ebnf;
  ebnf << json << "\n";
  const std::string item = ebnf_literal(f.before) + " root " + ebnf_literal(f.after);
  ebnf << "framed_items ::= " << item;
  if (f.max_items != 1) {
    ebnf << " (" << ebnf_literal(f.between) << " " << item << ")";
    if (f.max_items <= 0)
      ebnf << "*";
    else
      ebnf << "{0," << f.max_items - 1 << "}";
  }
  ebnf << "\nframed ::= " << ebnf_literal(f.open) << " framed_items " << ebnf_literal(f.close) << "\n";
  return xgrammar::Grammar::FromEBNF(ebnf.str(), "framed");
}

}  // namespace

GrammarVocab::GrammarVocab(const Tokenizer& tok) : size_(tok.vocab_size()) {
  const auto type = tok.model() == "gpt2" ? xgrammar::VocabType::BYTE_LEVEL : xgrammar::VocabType::BYTE_FALLBACK;
  impl_ = std::make_unique<Impl>(engine_vocab(tok), type, tok.end_ids());
  impl_->json_safe.assign(size_t(mask_words()), 0);
  for (int32_t t = 0; t < size_; ++t) {
    const std::string text = tok.piece(t, true);
    const bool safe = tok.is_end_of_generation(t) ||
                      std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
    if (safe) impl_->json_safe[size_t(t) / 32] |= 1u << (uint32_t(t) % 32);
  }
}

GrammarVocab::~GrammarVocab() = default;

struct Grammar::Impl {
  xgrammar::CompiledGrammar compiled;
  int vocab_size;
  const std::vector<uint32_t>* only = nullptr;  // JSON: the vocabulary's json_safe tokens
};

Grammar::Grammar() = default;
Grammar::~Grammar() = default;

namespace {

// A JSON spec's grammar, uncompiled (a choice's sides, joined by the engine's
// union so that their rules never collide).
xgrammar::Grammar json_grammar_of(const GrammarSpec& spec) {
  if (spec.kind == GrammarKind::kAnyJson) {
    xgrammar::Grammar any = xgrammar::Grammar::FromJSONSchema(kAnyObject, false, std::nullopt, std::make_pair(",", ":"), false);
    return spec.frame ? framed(any, *spec.frame) : any;
  }
  if (spec.frame && !spec.frame->case_before.empty()) return framed_cases(spec.text, *spec.frame);
  if (spec.frame) return framed(json_schema_grammar(spec.text), *spec.frame);
  return json_schema_grammar(spec.text);
}

// The spec compiled by `c`; the grammar engine's exceptions become
// GrammarErrors with the client's message.
xgrammar::CompiledGrammar compile_with(xgrammar::GrammarCompiler& c, const GrammarSpec& spec) {
  try {
    if (spec.or_else) return c.CompileGrammar(xgrammar::Grammar::Union({json_grammar_of(spec), json_grammar_of(*spec.or_else)}));
    switch (spec.kind) {
      case GrammarKind::kJsonSchema:
        if (spec.frame && !spec.frame->case_before.empty())
          return c.CompileGrammar(framed_cases(spec.text, *spec.frame));
        if (spec.frame) return c.CompileGrammar(framed(json_schema_grammar(spec.text), *spec.frame));
        return c.CompileJSONSchema(spec.text, false, std::nullopt, std::make_pair(",", ":"), true);
      case GrammarKind::kRegex: return c.CompileRegex(spec.text);
      case GrammarKind::kEbnf: return c.CompileGrammar(spec.text, "root");
      case GrammarKind::kAnyJson: break;
    }
    // Any object: not strict (any properties), unlike a schema's.
    if (spec.frame)
      return c.CompileGrammar(framed(xgrammar::Grammar::FromJSONSchema(kAnyObject, false, std::nullopt,
                                                                        std::make_pair(",", ":"), false),
                                     *spec.frame));
    return c.CompileJSONSchema(kAnyObject, false, std::nullopt, std::make_pair(",", ":"), false);
  } catch (const GrammarError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;  // out of memory is the budget's, not the spec's message
  } catch (const std::exception& e) {
    // Whatever the engine throws on a spec it cannot compile is the spec's
    // problem: its message goes back to the client as it is.
    throw GrammarError(client_message(e.what()));
  }
}

bool json_kind(const GrammarSpec& spec) {
  return spec.kind == GrammarKind::kJsonSchema || spec.kind == GrammarKind::kAnyJson;
}

// What every spec is checked against before the compiler sees it.
void check_before_compiling(const GrammarSpec& spec) {
  if (spec.or_else) {
    if (!json_kind(spec) || !json_kind(*spec.or_else) || spec.or_else->or_else)
      throw GrammarError("a choice of outputs is of two JSON constraints");
    GrammarSpec first = spec;
    first.or_else = nullptr;
    check_before_compiling(first);
    check_before_compiling(*spec.or_else);
    return;
  }
  check_limits(spec);
  if (spec.kind != GrammarKind::kJsonSchema) return;
  if (!spec.frame || spec.frame->case_before.empty()) return check_schema(spec.text, SchemaUse::kConstraint);
  // Per-case frames: an array of schemas, one per case, each checked.
  const nlohmann::json list = nlohmann::json::parse(spec.text, nullptr, false);
  if (!list.is_array() || list.size() != spec.frame->case_before.size() || list.empty())
    throw GrammarError("a framed choice needs one schema per case");
  for (const nlohmann::json& s : list) check_schema(s.dump(), SchemaUse::kConstraint);
}

// The entry of a cache (by tick of last use) used least recently.
template <typename Map>
typename Map::iterator least_recent(Map& m) {
  return std::min_element(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.second.tick < b.second.tick; });
}

// The cache's key: everything that makes one spec's grammar another's.
std::string spec_key(const GrammarSpec& spec) {
  std::string k(1, char('0' + int(spec.kind)));
  k += spec.text;
  if (spec.frame) {
    const JsonFrame& f = *spec.frame;
    for (const std::string* p : {&f.open, &f.before, &f.after, &f.between, &f.close, &f.numbered}) k += '\0' + *p;
    k += '\0' + std::to_string(f.max_items) + char('a' + int(f.style));
    for (const std::string& b : f.case_before) k += '\1' + b;
  }
  if (spec.or_else) k += '\2' + spec_key(*spec.or_else);
  return k;
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::finish(const GrammarVocab& vocab, const GrammarSpec& spec,
                                               xgrammar::CompiledGrammar compiled) {
  std::shared_ptr<Grammar> g(new Grammar);
  // XML parameters are text with newlines, not JSON: all of the vocabulary.
  const auto xml = [](const GrammarSpec& s) { return s.frame && s.frame->style != JsonFrame::Style::kJson; };
  const bool json = json_kind(spec) && !xml(spec) && !(spec.or_else && xml(*spec.or_else));
  g->impl_ = std::make_unique<Impl>(Impl{std::move(compiled), vocab.size(), json ? &vocab.impl_->json_safe : nullptr});
  // A constraint no token of this vocabulary can begin (a regex of bytes
  // the vocabulary has no token for, say) would leave nothing to sample.
  GrammarMatcher start(g);
  std::vector<uint32_t> bits(size_t(start.mask_words()));
  start.fill_mask(bits);
  if (!mask_any(bits)) throw GrammarError("no token of this model's vocabulary can begin the constrained output");
  return g;
}

std::shared_ptr<const Grammar> Grammar::compile(const GrammarVocab& vocab, const GrammarSpec& spec) {
  check_before_compiling(spec);
  return finish(vocab, spec, compile_with(vocab.impl_->compiler, spec));
}

std::shared_ptr<const Grammar> Grammar::lookup(const GrammarVocab& vocab, const std::string& key) {
  GrammarVocab::Impl& v = *vocab.impl_;
  std::lock_guard lock(v.cache_mu);
  auto it = v.cache.find(key);
  if (it == v.cache.end()) return nullptr;
  it->second.tick = ++v.cache_tick;
  return it->second.grammar;
}

std::shared_ptr<const Grammar> Grammar::cached(const GrammarVocab& vocab, const GrammarSpec& spec) {
  return lookup(vocab, spec_key(spec));
}

std::string Grammar::key(const GrammarSpec& spec) { return spec_key(spec); }

Grammar::CacheUse Grammar::cache_use(const GrammarVocab& vocab) {
  GrammarVocab::Impl& v = *vocab.impl_;
  std::lock_guard lock(v.cache_mu);
  return {v.cache.size(), v.cache_bytes};
}

std::shared_ptr<const Grammar> Grammar::compile(const GrammarVocab& vocab, const GrammarSpec& spec,
                                                const ProcessBudget& budget) {
  check_before_compiling(spec);
  GrammarVocab::Impl& v = *vocab.impl_;
  const std::string key = spec_key(spec);
  if (auto g = lookup(vocab, key)) return g;
  const std::string failed_key =
      key + "\n" + std::to_string(budget.cpu_seconds) + "s " + std::to_string(budget.memory_bytes) + "B";
  {
    std::lock_guard lock(v.cache_mu);
    if (auto it = v.failed.find(failed_key); it != v.failed.end()) {
      it->second.tick = ++v.cache_tick;
      throw GrammarError(it->second.message, it->second.why);
    }
  }
  // A compiler of its own in the child: the shared one's lock may have been
  // held by another thread at the fork. It takes the cores the server may
  // use (a new tool set under tool_choice "auto" is compiled before the
  // request's first token): the child is niced below the engine, and its
  // CPU budget counts all its threads. Not under a budget of memory too
  // small for the threads' stacks, nor where the child may start none.
  const int threads =
      budget.memory_bytes >= (size_t(256) << 20) && child_may_start_threads() ? cores_available() : 1;
  std::string json;
  try {
    json = run_in_child(
        [&] {
          xgrammar::GrammarCompiler c(v.info, threads, false, -1);
          return compile_with(c, spec).SerializeJSON();
        },
        budget);
  } catch (const GrammarError& e) {
    // Not the failures of the moment (a busy server, a client gone, a
    // compiler that did not start or answer).
    if (e.why() == GrammarFailure::kInvalid || e.why() == GrammarFailure::kOverBudget) {
      std::lock_guard lock(v.cache_mu);
      v.failed[failed_key] = {e.what(), e.why(), ++v.cache_tick};
      if (v.failed.size() > GrammarVocab::kFailedEntries) v.failed.erase(least_recent(v.failed));
    }
    throw;
  }
  auto back = xgrammar::CompiledGrammar::DeserializeJSON(json, v.info);
  if (!std::holds_alternative<xgrammar::CompiledGrammar>(back))
    throw GrammarError("the compiled constraint did not come back from its compiler", GrammarFailure::kCompilerFailed);
  auto g = finish(vocab, spec, std::move(std::get<xgrammar::CompiledGrammar>(back)));
  std::lock_guard lock(v.cache_mu);
  auto& slot = v.cache[key];
  v.cache_bytes += json.size() + key.size() - slot.bytes;
  slot = {g, json.size() + key.size(), ++v.cache_tick};
  // Least recently used out, within the cache's count and bytes.
  while (v.cache.size() > GrammarVocab::kCacheEntries || v.cache_bytes > GrammarVocab::kCacheBytes) {
    const auto oldest = least_recent(v.cache);
    if (oldest->first == key) break;
    v.cache_bytes -= oldest->second.bytes;
    v.cache.erase(oldest);
  }
  return g;
}

bool mask_any(std::span<const uint32_t> bits) {
  return std::any_of(bits.begin(), bits.end(), [](uint32_t w) { return w != 0; });
}

struct GrammarMatcher::Impl {
  std::shared_ptr<const Grammar> grammar;
  xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g)
    : impl_(std::make_unique<Impl>(Impl{g, xgrammar::GrammarMatcher(g->impl_->compiled)})) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::fill_mask(std::span<uint32_t> bits) {
  int64_t shape[1] = {int64_t(bits.size())};
  DLTensor t{};
  t.data = bits.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  impl_->matcher.FillNextTokenBitmask(&t);
  if (const std::vector<uint32_t>* only = impl_->grammar->impl_->only)
    for (size_t w = 0; w < bits.size(); ++w) bits[w] &= (*only)[w];
}

bool GrammarMatcher::accept(int32_t token) {
  if (token < 0 || token >= impl_->grammar->impl_->vocab_size) return false;
  return impl_->matcher.AcceptToken(token);
}

bool GrammarMatcher::accept_text(const std::string& text) {
  if (text.empty()) return true;
  return impl_->matcher.AcceptString(text);
}

bool GrammarMatcher::allows(std::span<const int32_t> tokens) {
  int taken = 0;
  while (size_t(taken) < tokens.size() && accept(tokens[size_t(taken)])) ++taken;
  if (taken > 0) impl_->matcher.Rollback(taken);
  return size_t(taken) == tokens.size();
}

bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

int GrammarMatcher::mask_words() const { return (impl_->grammar->impl_->vocab_size + 31) / 32; }

void apply_mask(std::span<float> logits, std::span<const uint32_t> bits) {
  for (size_t t = 0; t < logits.size(); ++t)
    if (!mask_allows(bits, int32_t(t))) logits[t] = -INFINITY;
}

}  // namespace cs
