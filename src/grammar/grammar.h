// Constrained decoding: what a sequence may sample next under a JSON schema,
// any JSON, a regular expression or an EBNF grammar, as a bit mask over the
// vocabulary. The grammar engine is xgrammar's C++ core (built from its PyPI
// sdist by scripts/build_xgrammar.sh); this floor keeps it behind our types,
// so nothing above includes its headers.
//
// GrammarVocab: one per tokenizer, built once (tens of ms for 49152 tokens):
// the vocabulary as the engine decodes it, control tokens never allowed,
// end-of-generation tokens allowed only where the grammar may end.
// Grammar: a compiled constraint, immutable, shared by every sequence using it.
// GrammarMatcher: one sequence's position in it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "base/error.h"
#include "grammar/compile_process.h"

namespace xgrammar {
class CompiledGrammar;
}

namespace cs {

class Tokenizer;

// What a request constrains its output with.
// kAnyJson: any JSON object (OpenAI's json_object).
enum class GrammarKind { kJsonSchema, kAnyJson, kRegex, kEbnf };

// JSON (a schema's, or any) is compact: no whitespace between tokens, so a
// small model cannot pad its output with newlines until max_tokens (inside
// a value of any type the engine's own rule allows a space after ',' and ':').
// A schema's JSON framed by literal text: open, then one or more items (at
// most max_items; 0 = no limit) each `before` JSON `after`, joined by
// `between`, then close. Tool calls are this: Hermes' <tool_call>{...}
// </tool_call> items, Mistral's [TOOL_CALLS][{...},{...}]. With
// case_before set, the spec's text is a JSON array of schemas, one per
// entry, and an item is any case_before[i] schema[i] `after` (harmony's
// calls, where the header names the function and the JSON is its
// arguments alone).
struct JsonFrame {
  std::string open, before, after, between, close;
  int max_items = 1;
  std::vector<std::string> case_before;
  // With case_before: how each schema's object is written. As JSON, or as
  // XML elements, a string's value as text and any other type's as JSON:
  // kParameters <parameter=KEY>VALUE</parameter> (xgrammar's
  // qwen_xml_parameter style), kArgKeys <arg_key>KEY</arg_key>
  // <arg_value>VALUE</arg_value> (GLM's), kInvoke <parameter name="KEY">
  // VALUE</parameter> (MiniMax's), kDsml <｜DSML｜parameter name="KEY"
  // string="true|false">VALUE</｜DSML｜parameter> (DeepSeek's; "true" where
  // the value is text: grammar/xml_kind.h's "string" or "text").
  enum class Style { kJson, kParameters, kArgKeys, kInvoke, kDsml } style = Style::kJson;
  // With case_before: where not empty, each case_before is followed by a
  // number (1 to 6 digits) and then this (Kimi's call ids,
  // functions.NAME:INDEX, before the arguments' tag).
  std::string numbered = {};
};


struct GrammarSpec {
  GrammarSpec() = default;
  GrammarSpec(GrammarKind k, std::string t, std::optional<JsonFrame> f = std::nullopt)
      : kind(k), text(std::move(t)), frame(std::move(f)) {}
  GrammarKind kind = GrammarKind::kAnyJson;
  std::string text;  // the schema (JSON), the regex or the EBNF (root rule "root"); unused for kAnyJson
  std::optional<JsonFrame> frame;  // kJsonSchema and kAnyJson (without case_before) only
  // Or this one: the output is either's (tool_choice "auto" beside a
  // response_format: the answer in its format, or calls). JSON kinds only,
  // one level.
  std::shared_ptr<const GrammarSpec> or_else;
};

// Why a constraint did not compile: the client's constraint is wrong (most
// errors), over the compile's budget, stopped because the client left, the
// compiler itself failed, or no compile could start (as many as the machine
// allows were running throughout the wait). Counted by outcome at /metrics.
enum class GrammarFailure { kInvalid, kOverBudget, kCancelled, kCompilerFailed, kBusy };

// A schema, regex or grammar that does not compile: the message says why
// (the engine's own words, with the path inside a schema where it gives one).
class GrammarError : public Error {
 public:
  explicit GrammarError(const std::string& what, GrammarFailure why = GrammarFailure::kInvalid)
      : Error(what), why_(why) {}
  GrammarFailure why() const { return why_; }

 private:
  GrammarFailure why_;
};

class GrammarVocab {
 public:
  explicit GrammarVocab(const Tokenizer& tok);
  ~GrammarVocab();
  GrammarVocab(const GrammarVocab&) = delete;
  GrammarVocab& operator=(const GrammarVocab&) = delete;
  int size() const { return size_; }
  // 32-bit words in a mask over this vocabulary.
  int mask_words() const { return (size_ + 31) / 32; }
  static constexpr size_t kCacheEntries = 256;
  static constexpr size_t kCacheBytes = size_t(256) << 20;
  static constexpr size_t kFailedEntries = 256;  // constraints remembered as failing (Grammar::compile)

 private:
  friend class Grammar;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int size_ = 0;
};

// A compiled grammar keeps a pointer into its vocabulary's tables: the
// vocabulary outlives every grammar compiled for it (one per model).
class Grammar {
 public:
  // Throws GrammarError for a spec that does not compile.
  static std::shared_ptr<const Grammar> compile(const GrammarVocab& vocab, const GrammarSpec& spec);
  // The same for a constraint from a client: the limits of grammar/limits.h
  // first, then the compile in a child process under `budget`
  // (grammar/compile_process.h: its CPU and wall time and memory, stopped
  // when budget.cancelled() says the client has gone), the result kept in
  // the vocabulary's cache (the latest kCacheEntries, at most kCacheBytes of
  // compiled grammars), so a repeated schema compiles once. A constraint
  // that failed for its own sake (kInvalid, kOverBudget) under the same
  // budget fails again at once with the same error, not compiled again.
  static std::shared_ptr<const Grammar> compile(const GrammarVocab& vocab, const GrammarSpec& spec,
                                                const ProcessBudget& budget);
  // The vocabulary's cached grammar for spec, or null; compiles nothing.
  static std::shared_ptr<const Grammar> cached(const GrammarVocab& vocab, const GrammarSpec& spec);
  // What the vocabulary's cache holds: compiled constraints, and their bytes
  // as its bound counts them (their serialized size).
  struct CacheUse {
    size_t entries = 0, bytes = 0;
  };
  static CacheUse cache_use(const GrammarVocab& vocab);
  // The cache's key of a spec: equal for specs that compile alike.
  static std::string key(const GrammarSpec& spec);
  ~Grammar();
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

 private:
  friend class GrammarMatcher;
  struct Impl;
  Grammar();
  // The cache's grammar under `key` (Grammar::key), or null; marks it recently used.
  static std::shared_ptr<const Grammar> lookup(const GrammarVocab& vocab, const std::string& key);
  static std::shared_ptr<const Grammar> finish(const GrammarVocab& vocab, const GrammarSpec& spec,
                                               xgrammar::CompiledGrammar compiled);
  std::unique_ptr<Impl> impl_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Bit t % 32 of word t / 32 set: token t may come next. `bits` has
  // mask_words() words.
  void fill_mask(std::span<uint32_t> bits);
  // Advances past `token`; false (and no change) when the grammar does not
  // allow it here.
  bool accept(int32_t token);
  // Advances past `text` (where a constraint starts inside a token's text:
  // Request::grammar_triggers); false when the grammar does not allow it
  // here (the state is then the one before any of it).
  bool accept_text(const std::string& text);
  // Whether the grammar allows these tokens next, in order (the state is
  // left as it was).
  bool allows(std::span<const int32_t> tokens);
  // An end-of-generation token was accepted: the output is complete.
  bool terminated() const;
  // Words of the mask fill_mask writes.
  int mask_words() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// logits[t] = -inf for every token the mask does not allow.
void apply_mask(std::span<float> logits, std::span<const uint32_t> bits);

// Whether the mask allows any token.
bool mask_any(std::span<const uint32_t> bits);

// Whether token t is allowed by the mask.
inline bool mask_allows(std::span<const uint32_t> bits, int32_t t) {
  return (bits[size_t(t) / 32] >> (uint32_t(t) % 32)) & 1u;
}

}  // namespace cs
