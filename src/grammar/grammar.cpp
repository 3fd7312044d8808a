#include "grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <sstream>

#include "grammar/limits.h"
#include "grammar/messages.h"
#include "grammar/schema_check.h"
#include "model/tokenizer.h"

namespace cs {

struct GrammarVocab::Impl {
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
// matches text, and those tokens are no text.
std::vector<std::string> engine_vocab(const Tokenizer& tok) {
  std::vector<std::string> out(size_t(tok.vocab_size()));
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    const TokenType t = tok.type(i);
    if (t != TokenType::kControl && t != TokenType::kUnknown && t != TokenType::kUnused) out[size_t(i)] = tok.token(i);
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

// The schema's grammar (its rules printed as EBNF, the schema's own rule
// renamed by xgrammar when another is the root) under a root that frames it.
xgrammar::Grammar framed(const std::string& schema, const JsonFrame& f) {
  const xgrammar::Grammar json =
      xgrammar::Grammar::FromJSONSchema(schema, false, std::nullopt, std::make_pair(",", ":"), true);
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

std::shared_ptr<const Grammar> Grammar::compile(const GrammarVocab& vocab, const GrammarSpec& spec) {
  xgrammar::GrammarCompiler& c = vocab.impl_->compiler;
  std::shared_ptr<Grammar> g(new Grammar);
  check_limits(spec);
  try {
    auto compiled = [&] {
      switch (spec.kind) {
        case GrammarKind::kJsonSchema:
          check_schema(spec.text);
          if (spec.frame) return c.CompileGrammar(framed(spec.text, *spec.frame));
          return c.CompileJSONSchema(spec.text, false, std::nullopt, std::make_pair(",", ":"), true);
        case GrammarKind::kRegex: return c.CompileRegex(spec.text);
        case GrammarKind::kEbnf: return c.CompileGrammar(spec.text, "root");
        case GrammarKind::kAnyJson: break;
      }
      // OpenAI's json_object: any object, compact like a schema's.
      return c.CompileJSONSchema(R"({"type": "object"})", false, std::nullopt, std::make_pair(",", ":"), false);
    }();
    const bool json = spec.kind == GrammarKind::kJsonSchema || spec.kind == GrammarKind::kAnyJson;
    g->impl_ = std::make_unique<Impl>(Impl{std::move(compiled), vocab.size(), json ? &vocab.impl_->json_safe : nullptr});
  } catch (const GrammarError&) {
    throw;
  } catch (const std::exception& e) {
    // Whatever the engine throws on a spec it cannot compile is the spec's
    // problem: its message goes back to the client as it is.
    throw GrammarError(client_message(e.what()));
  }
  // A constraint no token of this vocabulary can begin (a regex of bytes
  // the vocabulary has no token for, say) would leave nothing to sample.
  GrammarMatcher start(g);
  std::vector<uint32_t> bits(size_t(start.mask_words()));
  start.fill_mask(bits);
  if (!mask_any(bits)) throw GrammarError("no token of this model's vocabulary can begin the constrained output");
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

bool GrammarMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

int GrammarMatcher::mask_words() const { return (impl_->grammar->impl_->vocab_size + 31) / 32; }

void apply_mask(std::span<float> logits, std::span<const uint32_t> bits) {
  for (size_t t = 0; t < logits.size(); ++t)
    if (!mask_allows(bits, int32_t(t))) logits[t] = -INFINITY;
}

}  // namespace cs
