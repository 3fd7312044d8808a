// Constrained decoding's masks (src/grammar) on two real kinds of vocabulary:
// SentencePiece with byte fallback (the tiny model's) and byte-level BPE
// (llama.cpp's GPT-2 test vocabulary). Random walks that sample uniformly
// among the tokens a mask allows must always produce text the constraint
// accepts, checked by independent means (nlohmann's JSON parser and the
// schema's rules written out here, PCRE2); disallowed tokens are
// refused; control tokens are never allowed; bad specs are typed errors.
#include "grammar/grammar.h"
#include "grammar/compile_later.h"
#include "server/call_stream.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"
#include "tiny_model.h"

namespace cs {
namespace {

// Whether `pattern` matches all of `text` (PCRE2; GCC 12's std::regex warns
// under the sanitizer build's optimisation).
bool full_match(const std::string& text, const std::string& pattern) {
  const std::string anchored = "^(?:" + pattern + ")$";
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), PCRE2_ZERO_TERMINATED, 0, &err, &at, nullptr);
  if (!re) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

// The JSON text with every number outside strings written as 0.
std::string zero_numbers(const std::string& s) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < s.size()) out += s[++i];
      else if (c == '"') in_string = false;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      while (i + 1 < s.size() && std::string_view("0123456789+-.eE").find(s[i + 1]) != std::string_view::npos) ++i;
      out += '0';
    } else {
      in_string = c == '"';
      out += c;
    }
  }
  return out;
}

const Tokenizer& tiny_vocab() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile(test::tiny_model()));
  return t;
}

const Tokenizer& gpt2_vocab() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile(std::string(CS_VOCAB_DIR) + "/ggml-vocab-gpt-2.gguf"));
  return t;
}

struct Walk {
  std::string text;
  bool ended = false;  // the grammar accepted an end-of-generation token
};

// Samples uniformly among the allowed tokens (an end-of-generation token,
// when allowed, half the time), up to max_steps; every mask must allow
// something until the walk ends.
Walk walk(const Tokenizer& tok, const GrammarVocab& vocab, const std::shared_ptr<const Grammar>& g, uint32_t seed,
          int max_steps = 300) {
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  std::vector<uint32_t> bits(size_t(vocab.mask_words()));
  std::vector<int32_t> ids;
  Walk out;
  for (int step = 0; step < max_steps && !m.terminated(); ++step) {
    m.fill_mask(bits);
    std::vector<int32_t> allowed, ends;
    for (int32_t t = 0; t < vocab.size(); ++t)
      if (mask_allows(bits, t)) (tok.is_end_of_generation(t) ? ends : allowed).push_back(t);
    EXPECT_FALSE(allowed.empty() && ends.empty()) << "nothing allowed after '" << tok.decode(ids) << "'";
    if (allowed.empty() && ends.empty()) break;
    const bool end = !ends.empty() && (allowed.empty() || rng() % 2);
    const int32_t t = end ? ends[0] : allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept(t));
    if (end) out.ended = true;
    else ids.push_back(t);
  }
  out.text = tok.decode(ids);
  return out;
}

// A nested schema with the features a tool call's arguments use.
const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "color": {"enum": ["red", "green"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["zip"], "additionalProperties": false}
  },
  "required": ["name", "age", "color", "address"],
  "additionalProperties": false
})";

// kSchema's rules, checked on a parsed value.
void expect_valid(const nlohmann::json& j, const std::string& text) {
  ASSERT_TRUE(j.is_object()) << text;
  for (const char* k : {"name", "age", "color", "address"}) ASSERT_TRUE(j.contains(k)) << k << " missing: " << text;
  for (const auto& [k, v] : j.items())
    EXPECT_TRUE(k == "name" || k == "age" || k == "color" || k == "tags" || k == "address") << k << ": " << text;
  EXPECT_TRUE(j["name"].is_string());
  EXPECT_LE(j["name"].get<std::string>().size(), 6u * 4) << text;  // 6 characters, up to 4 bytes each
  ASSERT_TRUE(j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int64_t>(), 0);
  EXPECT_LE(j["age"].get<int64_t>(), 150);
  EXPECT_TRUE(j["color"] == "red" || j["color"] == "green") << text;
  if (j.contains("tags")) {
    ASSERT_TRUE(j["tags"].is_array());
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& b : j["tags"]) EXPECT_TRUE(b.is_boolean());
  }
  ASSERT_TRUE(j["address"].is_object());
  EXPECT_EQ(j["address"].size(), 1u) << text;
  EXPECT_TRUE(full_match(j["address"]["zip"].get<std::string>(), "[0-9]{5}")) << text;
}

std::string hex(const std::string& s) {
  std::string out;
  char b[4];
  for (unsigned char c : s) std::snprintf(b, sizeof b, "%02x", c), out += b;
  return out;
}

// Whitespace between JSON tokens (not inside a string literal).
bool space_outside_strings(const std::string& s) {
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (in_string && s[i] == '\\') ++i;
    else if (s[i] == '"') in_string = !in_string;
    else if (!in_string && std::isspace(static_cast<unsigned char>(s[i]))) return true;
  }
  return false;
}

class GrammarWalks : public testing::TestWithParam<const char*> {
 protected:
  const Tokenizer& tok() const { return std::string(GetParam()) == "tiny" ? tiny_vocab() : gpt2_vocab(); }
};

TEST_P(GrammarWalks, JsonSchemaOutputsAreValid) {
  const GrammarVocab vocab(tok());
  const auto g = Grammar::compile(vocab, {GrammarKind::kJsonSchema, kSchema});
  int ended = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const Walk w = walk(tok(), vocab, g, seed);
    SCOPED_TRACE(w.text);
    if (!w.ended) continue;
    ++ended;
    EXPECT_FALSE(space_outside_strings(w.text)) << "compact JSON";
    const nlohmann::json j = nlohmann::json::parse(w.text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << w.text << " " << hex(w.text);
    expect_valid(j, w.text);
  }
  EXPECT_GE(ended, 18) << "walks that reached the end";
}

TEST_P(GrammarWalks, AnyJsonIsAnObject) {
  const GrammarVocab vocab(tok());
  const auto g = Grammar::compile(vocab, {GrammarKind::kAnyJson, ""});
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const Walk w = walk(tok(), vocab, g, 100 + seed, 200);
    if (!w.ended) continue;
    // A uniform walk writes numbers beyond a double's range, which the
    // parser refuses: syntax is checked with every number written as 0.
    const nlohmann::json j = nlohmann::json::parse(zero_numbers(w.text), nullptr, false);
    EXPECT_TRUE(j.is_object()) << w.text << " " << hex(w.text);
  }
}

TEST_P(GrammarWalks, RegexAndEbnfOutputsMatch) {
  const GrammarVocab vocab(tok());
  const auto re = Grammar::compile(vocab, {GrammarKind::kRegex, "[a-c]{2}-[0-9]{1,3}"});
  const auto ebnf = Grammar::compile(vocab, {GrammarKind::kEbnf, "root ::= \"yes\" | \"no\" | \"maybe \" [0-9]"});
  for (uint32_t seed = 0; seed < 10; ++seed) {
    const Walk a = walk(tok(), vocab, re, seed);
    EXPECT_TRUE(a.ended);
    EXPECT_TRUE(full_match(a.text, "[a-c]{2}-[0-9]{1,3}")) << a.text;
    const Walk b = walk(tok(), vocab, ebnf, seed);
    EXPECT_TRUE(b.ended);
    EXPECT_TRUE(full_match(b.text, "yes|no|maybe [0-9]")) << b.text;
  }
}

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// tool_choice "required" (and "auto", from a call's trigger on): in each
// format, every walk that ends is one or more calls (one when not parallel)
// that parse back, each naming a tool and with arguments valid against that
// tool's schema, and nothing else. Harmony's are read through the reasoning
// split, as the server reads them (under auto a call may name its recipient
// in the role's header).
TEST_P(GrammarWalks, RequiredToolCallsAreValidInEveryFormat) {
  const GrammarVocab vocab(tok());
  // lookup's parameters are kSchema with its address as pydantic writes a
  // nested model: a reference into the parameters' own $defs, which the
  // call's schema must still resolve.
  nlohmann::ordered_json lookup = nlohmann::ordered_json::parse(kSchema);
  lookup["$defs"]["Address"] = lookup["properties"]["address"];
  lookup["properties"]["address"] = {{"$ref", "#/$defs/Address"}};
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(std::string(R"([
    {"type": "function", "function": {"name": "lookup", "parameters": )") + lookup.dump() + R"(}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
      "properties": {"tz": {"enum": ["utc", "local"]}}, "additionalProperties": false}}}])");
  int role_headers = 0, dsml_tags = 0;
  const ParamTypes types = param_types(tools);
  for (const auto kind : {ToolChoice::Kind::kRequired, ToolChoice::Kind::kAuto})
  for (const ToolFormat f :
       {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral, ToolFormat::kHarmony, ToolFormat::kQwenXml,
        ToolFormat::kGlmXml, ToolFormat::kMiniMaxXml, ToolFormat::kDsml, ToolFormat::kDsmlV4, ToolFormat::kSeedXml,
        ToolFormat::kKimi})
    for (const bool parallel : {false, true}) {
      SCOPED_TRACE(std::string(tool_format_name(f)) + (parallel ? " parallel" : "") +
                   (kind == ToolChoice::Kind::kAuto ? " auto" : ""));
      const auto g = Grammar::compile(vocab, tool_call_grammar(tools, f, {kind, ""}, parallel));
      int ended = 0;
      for (uint32_t seed = 0; seed < 8; ++seed) {
        // DSML's and Kimi's tags are long: more steps for a tiny vocabulary's parallel calls.
        const bool long_tags = f == ToolFormat::kDsml || f == ToolFormat::kDsmlV4 || f == ToolFormat::kKimi;
        const Walk w = walk(tok(), vocab, g, 300 + seed, long_tags ? 1500 : 600);
        if (!w.ended) continue;
        ++ended;
        // A uniform walk may write a surrogate's code point in a string, which
        // the grammar engine takes as a character and no JSON reader does:
        // such walks are not read back.
        if (!valid_utf8(w.text)) continue;
        role_headers += w.text.starts_with("to=functions.");
        const std::string answer = f == ToolFormat::kHarmony ? split_channels(w.text).content : w.text;
        const ParsedReply r = parse_tool_calls(answer, f, &types);
        EXPECT_EQ(r.content, "") << w.text;
        if (f == ToolFormat::kDsml || f == ToolFormat::kDsmlV4) {
          // Each parameter's tag says whether its value is text, as its schema does.
          for (size_t at = w.text.find("parameter name=\""); at != std::string::npos;
               at = w.text.find("parameter name=\"", at + 1), ++dsml_tags) {
            const size_t key = at + 16, quote = w.text.find('"', key);
            const std::string name = w.text.substr(key, quote - key);
            const bool text = name == "name" || name == "color" || name == "tz";
            const std::string tag = text ? "\" string=\"true\">" : "\" string=\"false\">";
            EXPECT_EQ(w.text.substr(quote, tag.size()), tag) << w.text;
          }
        }
        // Read as a stream reads it (server/call_stream.h): the same calls.
        const ParsedReply streamed = read_calls(answer, f, true, &types);
        ASSERT_EQ(streamed.calls.size(), r.calls.size()) << w.text;
        for (size_t k = 0; k < r.calls.size(); ++k) {
          EXPECT_TRUE(streamed.calls[k].complete);
          EXPECT_EQ(streamed.calls[k].name, r.calls[k].name);
          EXPECT_EQ(nlohmann::json::parse(streamed.calls[k].arguments, nullptr, false),
                    nlohmann::json::parse(r.calls[k].arguments, nullptr, false)) << w.text;
        }
        ASSERT_GE(r.calls.size(), 1u) << w.text;
        if (!parallel) {
          EXPECT_EQ(r.calls.size(), 1u) << w.text;
        }
        for (const ToolCall& c : r.calls) {
          const nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
          ASSERT_TRUE(args.is_object()) << w.text;
          if (c.name == "lookup")
            expect_valid(args, w.text);
          else
            EXPECT_TRUE(c.name == "now" && (args.empty() || args == nlohmann::json{{"tz", "utc"}} ||
                                             args == nlohmann::json{{"tz", "local"}}))
                << w.text;
        }
      }
      EXPECT_GE(ended, 4) << "walks that reached the end";
    }
  EXPECT_GT(role_headers, 0) << "auto's harmony calls with the recipient in the role's header";
  EXPECT_GT(dsml_tags, 10) << "DSML's parameter tags";
}

// A choice of outputs (GrammarSpec::or_else: tool_choice "auto" beside a
// response_format): every walk that ends is the answer, valid against its
// schema, or calls that parse back; both sides are taken.
TEST_P(GrammarWalks, AnAnswerOrCallsIsOneOfThem) {
  const GrammarVocab vocab(tok());
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "now",
      "parameters": {"type": "object", "properties": {"tz": {"enum": ["utc", "local"]}}, "required": ["tz"],
                     "additionalProperties": false}}}])");
  GrammarSpec spec{GrammarKind::kJsonSchema, kSchema};
  spec.or_else = std::make_shared<const GrammarSpec>(tool_call_grammar(tools, ToolFormat::kHermes, {}, true));
  const auto g = Grammar::compile(vocab, spec);
  int answers = 0, calls = 0;
  for (uint32_t seed = 0; seed < 24; ++seed) {
    const Walk w = walk(tok(), vocab, g, 500 + seed, 600);
    if (!w.ended) continue;
    SCOPED_TRACE(w.text);
    const ParsedReply r = parse_tool_calls(w.text, ToolFormat::kHermes);
    if (r.calls.empty()) {
      ++answers;
      const nlohmann::json j = nlohmann::json::parse(w.text, nullptr, false);
      ASSERT_FALSE(j.is_discarded());
      expect_valid(j, w.text);
    } else {
      ++calls;
      EXPECT_EQ(r.content, "");
      for (const ToolCall& c : r.calls) {
        EXPECT_EQ(c.name, "now");
        EXPECT_TRUE(c.arguments == R"({"tz":"utc"})" || c.arguments == R"({"tz":"local"})") << c.arguments;
      }
    }
  }
  EXPECT_GT(answers, 0);
  EXPECT_GT(calls, 0);
  // Only JSON constraints, one level, make a choice.
  GrammarSpec regex{GrammarKind::kRegex, "a+"};
  regex.or_else = spec.or_else;
  EXPECT_THROW(Grammar::compile(vocab, regex), GrammarError);
}

INSTANTIATE_TEST_SUITE_P(Vocab, GrammarWalks, testing::Values("tiny", "gpt2"));

// A token the mask does not allow is refused and changes nothing; control
// tokens are never allowed, end-of-generation ones only where the grammar
// may end.
TEST(Grammar, DisallowedTokensAreRefused) {
  const Tokenizer& tok = tiny_vocab();
  const GrammarVocab vocab(tok);
  GrammarMatcher m(Grammar::compile(vocab, {GrammarKind::kEbnf, "root ::= \"ab\""}));
  std::vector<uint32_t> bits(size_t(vocab.mask_words()));
  m.fill_mask(bits);
  const int32_t a = *tok.find("<0x61>"), b = *tok.find("<0x62>"), eos = tok.eos(), bos = tok.bos();
  EXPECT_TRUE(mask_allows(bits, a));
  EXPECT_FALSE(mask_allows(bits, b));
  EXPECT_FALSE(mask_allows(bits, eos));  // "" is not "ab"
  EXPECT_FALSE(mask_allows(bits, bos));  // a control token
  EXPECT_FALSE(m.accept(b));
  EXPECT_FALSE(m.accept(-1));
  EXPECT_FALSE(m.accept(vocab.size()));
  EXPECT_TRUE(m.accept(a));
  EXPECT_TRUE(m.accept(b));
  m.fill_mask(bits);
  EXPECT_TRUE(mask_allows(bits, eos));
  EXPECT_FALSE(mask_allows(bits, a));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(eos));
  EXPECT_TRUE(m.terminated());
}

// Harmony's message markup (gpt-oss's o200k vocabulary) is text to a
// grammar: a tool call's header takes the control tokens the model was
// trained to write, as well as the same text spelled in ordinary tokens;
// the ends of a turn stay ends, and other control tokens stay out.
TEST(Grammar, HarmonyMarkupIsText) {
  static const Tokenizer tok = Tokenizer::from_gguf(GgufFile(std::string(CS_VOCAB_DIR) + "/ggml-vocab-o200k.gguf"));
  const GrammarVocab vocab(tok);
  GrammarMatcher m(Grammar::compile(vocab, {GrammarKind::kEbnf, R"(root ::= "<|channel|>final<|message|>" [a-z]+)"}));
  std::vector<uint32_t> bits(size_t(vocab.mask_words()));
  m.fill_mask(bits);
  const int32_t channel = *tok.find("<|channel|>"), message = *tok.find("<|message|>");
  EXPECT_TRUE(mask_allows(bits, channel));
  EXPECT_TRUE(mask_allows(bits, tok.encode("<", false)[0]));
  EXPECT_FALSE(mask_allows(bits, *tok.find("<|start|>")));
  EXPECT_FALSE(mask_allows(bits, *tok.find("<|startoftext|>")));
  EXPECT_TRUE(m.accept(channel));
  for (int32_t t : tok.encode("final", false)) EXPECT_TRUE(m.accept(t));
  EXPECT_TRUE(m.accept(message));
  for (int32_t t : tok.encode("yes", false)) EXPECT_TRUE(m.accept(t));
  EXPECT_TRUE(m.accept(*tok.find("<|return|>")));
  EXPECT_TRUE(m.terminated());
}

TEST(Grammar, MaskedLogitsAreMinusInfinity) {
  std::vector<float> logits = {1, 2, 3, 4, 5};
  const std::vector<uint32_t> bits = {0b01010};
  apply_mask(logits, bits);
  EXPECT_EQ(logits, (std::vector<float>{-INFINITY, 2, -INFINITY, 4, -INFINITY}));
}

// allows() tests a run of tokens and leaves the matcher where it was, whether
// the grammar takes all of them, some or none (the thought's close is forced
// only where the constraint takes it whole).
TEST(Grammar, AllowsTestsTokensWithoutTakingThem) {
  const Tokenizer& tok = tiny_vocab();
  const GrammarVocab vocab(tok);
  GrammarMatcher m(Grammar::compile(vocab, {GrammarKind::kEbnf, "root ::= \"abc\""}));
  const int32_t a = *tok.find("<0x61>"), b = *tok.find("<0x62>"), c = *tok.find("<0x63>");
  EXPECT_TRUE(m.allows(std::vector<int32_t>{a, b, c}));
  EXPECT_FALSE(m.allows(std::vector<int32_t>{a, c}));
  EXPECT_FALSE(m.allows(std::vector<int32_t>{b}));
  EXPECT_TRUE(m.allows(std::vector<int32_t>{}));
  EXPECT_TRUE(m.accept(a));  // still at the start
  EXPECT_FALSE(m.allows(std::vector<int32_t>{a}));
  EXPECT_TRUE(m.allows(std::vector<int32_t>{b, c, tok.eos()}));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(b));
  EXPECT_TRUE(m.accept(c));
  EXPECT_TRUE(m.accept(tok.eos()));
  EXPECT_TRUE(m.terminated());
}

// What does not compile is a GrammarError with the engine's reason.
TEST(Grammar, BadSpecsAreTypedErrors) {
  const GrammarVocab vocab(tiny_vocab());
  for (const GrammarSpec& bad : {GrammarSpec{GrammarKind::kJsonSchema, "{not json"},
                                 GrammarSpec{GrammarKind::kJsonSchema, R"({"type": "frobnicate"})"},
                                 GrammarSpec{GrammarKind::kJsonSchema, R"({"$ref": "#/$defs/missing"})"},
                                 GrammarSpec{GrammarKind::kRegex, "(unclosed"},
                                 GrammarSpec{GrammarKind::kEbnf, "root ::= undefined_rule"},
                                 GrammarSpec{GrammarKind::kEbnf, "no rules here"}}) {
    try {
      Grammar::compile(vocab, bad);
      ADD_FAILURE() << "compiled: " << bad.text;
    } catch (const GrammarError& e) {
      const std::string m = e.what();
      EXPECT_GT(m.size(), 10u) << bad.text;
      EXPECT_EQ(m.find(".cc:"), std::string::npos) << m;  // no log prefix or source path
      EXPECT_NE(m[0], '[') << m;
      std::printf("[grammar] %s -> %s\n", bad.text.c_str(), e.what());
    }
  }
}

// The messages a client sees, for the kinds it can get wrong.
TEST(Grammar, ErrorMessagesNameTheProblem) {
  const GrammarVocab vocab(tiny_vocab());
  auto error = [&](GrammarKind k, const std::string& text) -> std::string {
    try {
      Grammar::compile(vocab, {k, text});
    } catch (const GrammarError& e) {
      return e.what();
    }
    return "";
  };
  // Schemas are checked first (grammar/schema_check.h): the message names the place.
  EXPECT_EQ(error(GrammarKind::kJsonSchema, R"({"type": "frobnicate"})"),
            "at /type: type \"frobnicate\" is not a JSON type (string, number, integer, boolean, object, array, null)");
  EXPECT_EQ(error(GrammarKind::kJsonSchema, R"({"$ref": "#/$defs/missing"})"),
            "at /$ref: $ref \"#/$defs/missing\" leads nowhere in this schema");
  // A keyword the engine would drop is refused before it could be (schema_check.h).
  EXPECT_EQ(error(GrammarKind::kJsonSchema, R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})"),
            "at /uniqueItems: uniqueItems (items that all differ) is not supported (the grammar engine cannot enforce "
            "it, so output could break the schema; docs/serving.md lists what it enforces)");
  EXPECT_EQ(error(GrammarKind::kRegex, "(unclosed"), "Regex parsing error at position 10: The parenthesis is not closed.");
  EXPECT_EQ(error(GrammarKind::kEbnf, "root ::= undefined_rule"),
            "EBNF parser error at line 1, column 10: Rule \"undefined_rule\" is not defined");
}

// Constraints over the compiler's limits (grammar/limits.h) are refused before
// it runs, the message naming the limit: a schema 20,000 levels deep (which
// overflowed a thread's stack in the compiler), 33 levels, huge enums and
// property lists, nested or sprawling regexes, grammars of too many rules or
// groups. What real clients send stays well inside.
TEST(Grammar, LimitsAreCheckedBeforeCompiling) {
  const GrammarVocab vocab(tiny_vocab());
  auto error = [&](GrammarKind k, const std::string& text) -> std::string {
    try {
      Grammar::compile(vocab, {k, text});
    } catch (const GrammarError& e) {
      return e.what();
    }
    return "";
  };
  auto nested = [](int levels, const std::string& open, const std::string& close, const std::string& leaf) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += open;
    s += leaf;
    for (int i = 0; i < levels; ++i) s += close;
    return s;
  };
  EXPECT_EQ(error(GrammarKind::kJsonSchema, nested(20000, R"({"type":"array","items":)", "}", R"({"type":"string"})")),
            "the schema is 500017 bytes; at most 262144 bytes are compiled");
  EXPECT_EQ(error(GrammarKind::kJsonSchema, nested(200, R"({"type":"array","items":)", "}", R"({"type":"string"})")),
            "the schema nests deeper than 128 levels of JSON; at most 32 levels of subschemas are compiled");
  const std::string deep33 = nested(33, R"({"type":"array","items":)", "}", R"({"type":"string"})");
  EXPECT_EQ(error(GrammarKind::kJsonSchema, deep33).substr(0, 20), "at /items/items/item");
  EXPECT_NE(error(GrammarKind::kJsonSchema, deep33).find("the schema nests subschemas more than 32 levels deep; at most 32 are compiled"),
            std::string::npos);
  EXPECT_EQ(error(GrammarKind::kJsonSchema, nested(32, R"({"type":"array","items":)", "}", R"({"type":"string"})")), "");
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; i < 1025; ++i) {
    big_enum += i ? ",\"" : "\"";
    big_enum += std::to_string(i) + "\"";
  }
  big_enum += "]}";
  EXPECT_EQ(error(GrammarKind::kJsonSchema, big_enum), "at /enum: enum has 1025 values; at most 1024 are compiled");
  std::string props = R"({"type":"object","properties":{)";
  for (int i = 0; i < 1025; ++i) {
    props += i ? ",\"p" : "\"p";
    props += std::to_string(i) + R"(":{"type":"integer"})";
  }
  props += "}}";
  EXPECT_EQ(error(GrammarKind::kJsonSchema, props),
            "at /properties: properties has 1025 entries; at most 1024 are compiled");
  EXPECT_EQ(error(GrammarKind::kJsonSchema, std::string(R"({"description":")") + std::string(300000, 'x') + "\"}"),
            "the schema is 300018 bytes; at most 262144 bytes are compiled");
  EXPECT_EQ(error(GrammarKind::kRegex, nested(33, "(", ")", "a")),
            "the regex nests groups 33 deep; at most 32 levels are compiled");
  EXPECT_EQ(error(GrammarKind::kRegex, nested(100000, "(", ")", "a")),
            "the regex is 200001 bytes; at most 16384 bytes are compiled");
  std::string alts = "a";
  for (int i = 0; i < 1025; ++i) alts += "|a";
  EXPECT_EQ(error(GrammarKind::kRegex, alts), "the regex has 1025 alternatives; at most 1024 alternatives are compiled");
  EXPECT_EQ(error(GrammarKind::kRegex, "[(((((((((((((((((((((((((((((((((((]x"), "");  // parentheses in a class are characters
  EXPECT_EQ(error(GrammarKind::kJsonSchema, R"({"type":"string","pattern":")" + nested(40, "(", ")", "a") + "\"}"),
            "at /pattern: pattern nests groups 40 deep; at most 32 levels are compiled");
  std::string rules = "root ::= r0\n";
  for (int i = 0; i < 1024; ++i) {
    rules += 'r';
    rules += std::to_string(i) + " ::= \"a\"\n";
  }
  EXPECT_EQ(error(GrammarKind::kEbnf, rules), "the grammar has 1025 rules; at most 1024 rules are compiled");
  EXPECT_EQ(error(GrammarKind::kEbnf, "root ::= " + nested(33, "(", ")", "\"a\"")),
            "the grammar nests groups 33 deep; at most 32 levels are compiled");
  EXPECT_EQ(error(GrammarKind::kEbnf, "root ::= \"((((((((((((((((((((((((((((((((((((\" [((((((((((((((((((((((((((((((((((((]"), "");
}

// A client's constraint compiles in a child process under a budget
// (grammar/compile_process.h): an enum of 1000 strings of 200 characters
// (within the limits; 15 s to compile in the process on this project's
// hosts) is stopped at its CPU budget, or when the client goes away; a
// memory budget too small fails as such; a bad regex gives the compiler's
// own message (each error typed: GrammarFailure, /metrics' outcome); a spec
// compiled once comes from the cache after.
// Budgeted compiles' children run a few at a time (compile_process.h):
// while one holds the only place, a second waits its wall budget and is
// refused as busy without starting; once the first has ended, it runs.
TEST(GrammarBudget, ChildrenRunAFewAtATime) {
  char dir[] = "/tmp/cs_children_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string started = std::string(dir) + "/started", go = std::string(dir) + "/go",
                    second = std::string(dir) + "/second";
  const auto touch = [](const std::string& path) { ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600)); };
  const auto exists = [](const std::string& path) { return ::access(path.c_str(), F_OK) == 0; };
  ProcessBudget one;
  one.max_children = 1;
  one.wall_seconds = 600;
  std::string first_answer;
  std::thread first([&] {
    first_answer = run_in_child(
        [&] {
          touch(started);
          while (!exists(go)) ::usleep(1000);  // holds its place until the test says
          return std::string("first");
        },
        one);
  });
  while (!exists(started)) ::usleep(1000);
  ProcessBudget brief = one;
  brief.wall_seconds = 0.1;  // a wait of twice that
  const auto run_second = [&] {
    return run_in_child(
        [&] {
          touch(second);
          return std::string("second");
        },
        brief);
  };
  try {
    run_second();
    ADD_FAILURE() << "a second child ran beside the first";
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.why(), GrammarFailure::kBusy);
    EXPECT_STREQ(e.what(), "the server is compiling as many constraints as it runs at once (1) and none ended within "
                           "0.2 s; retry later");
  }
  EXPECT_FALSE(exists(second)) << "refused before it started";
  touch(go);
  first.join();
  EXPECT_EQ(first_answer, "first");
  EXPECT_EQ(run_second(), "second");
  std::filesystem::remove_all(dir);
  // A child still running when its wall time is spent, with its CPU time
  // not (here it sleeps: a niced compile a loaded machine starves does the
  // same), is the server's load: busy, not over the constraint's budget.
  ProcessBudget starved;
  starved.wall_seconds = 0.2;
  try {
    run_in_child([] { ::sleep(30); return std::string("late"); }, starved);
    ADD_FAILURE() << "a child past its wall time answered";
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.why(), GrammarFailure::kBusy);
    EXPECT_TRUE(std::string(e.what()).starts_with("the server was too busy to compile the constraint: it had 0.0 s of "
                                                  "CPU time in 0.2 s (its budget: 10 s of CPU time); retry later"))
        << e.what();
  }
  EXPECT_GE(default_children(size_t(1) << 30), 1);
}

TEST(GrammarBudget, CompilesInAChildWithinItsBudget) {
  const GrammarVocab vocab(tiny_vocab());
  std::mt19937 rng(1);
  std::string heavy = R"({"enum":[)";
  for (int i = 0; i < 1000; ++i) {
    heavy += i ? ",\"" : "\"";
    for (int k = 0; k < 200; ++k) heavy += char('a' + rng() % 26);
    heavy += '"';
  }
  heavy += "]}";
  GrammarFailure why = GrammarFailure::kInvalid;  // the last error's
  auto error = [&](const GrammarSpec& spec, const ProcessBudget& b) -> std::string {
    try {
      Grammar::compile(vocab, spec, b);
    } catch (const GrammarError& e) {
      why = e.why();
      return e.what();
    }
    return "";
  };
  ProcessBudget b;
  b.cpu_seconds = 1;
  b.wall_seconds = 600;  // the CPU limit decides, however busy the machine (the child runs niced)
  EXPECT_EQ(error({GrammarKind::kJsonSchema, heavy}, b), "the constraint did not compile within its budget of 1 s of CPU time");
  EXPECT_EQ(why, GrammarFailure::kOverBudget);
  // Asked again under the same budget: the same error, and no compile (no
  // child's CPU time is added to this process's children's).
  const auto children_cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_CHILDREN, &u);
    return std::pair(u.ru_utime.tv_sec, u.ru_utime.tv_usec);
  };
  const auto before = children_cpu();
  EXPECT_EQ(error({GrammarKind::kJsonSchema, heavy}, b), "the constraint did not compile within its budget of 1 s of CPU time");
  EXPECT_EQ(why, GrammarFailure::kOverBudget);
  EXPECT_EQ(children_cpu(), before);
  // The client goes away 200 ms in: stopped then (the compile alone takes
  // seconds, and would end in an answer, not this message).
  ProcessBudget gone;
  auto t0 = std::chrono::steady_clock::now();
  gone.cancelled = [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200); };
  EXPECT_EQ(error({GrammarKind::kJsonSchema, heavy}, gone), "the compile was stopped: the client went away");
  EXPECT_EQ(why, GrammarFailure::kCancelled);
  // 1 MiB of memory beyond what the process has mapped is not enough for it
  // (sanitizer builds set no such limit: compile_process.h).
  if (address_space_limited()) {
    ProcessBudget tiny;
    tiny.memory_bytes = 1 << 20;
    tiny.cpu_seconds = 60;
    const std::string oom = error({GrammarKind::kJsonSchema, heavy}, tiny);
    EXPECT_NE(oom.find("budget"), std::string::npos) << oom;
    EXPECT_NE(oom.find("MiB"), std::string::npos) << oom;
    EXPECT_EQ(why, GrammarFailure::kOverBudget);
  }
  // The compiler's own words come back from the child.
  EXPECT_EQ(error({GrammarKind::kRegex, "(unclosed"}, {}), "Regex parsing error at position 10: The parenthesis is not closed.");
  EXPECT_EQ(why, GrammarFailure::kInvalid);
  EXPECT_EQ(error({GrammarKind::kRegex, "(unclosed"}, {}), "Regex parsing error at position 10: The parenthesis is not closed.");
  EXPECT_EQ(why, GrammarFailure::kInvalid);
  // Compiled in the child, the grammar works as one compiled here does; the
  // second time it comes from the cache.
  const GrammarSpec ok{GrammarKind::kRegex, "[0-9]{3}"};
  const auto g1 = Grammar::compile(vocab, ok, {});
  const auto g2 = Grammar::compile(vocab, ok, {});
  EXPECT_EQ(g1, g2);
  GrammarMatcher a(g1), b2(Grammar::compile(vocab, ok));
  std::vector<uint32_t> ma(size_t(a.mask_words())), mb(size_t(b2.mask_words()));
  a.fill_mask(ma);
  b2.fill_mask(mb);
  EXPECT_EQ(ma, mb);
}

// An optional constraint's compile (grammar/compile_later.h): its caller
// waits `patience` at most; a compile still running then goes on, once per
// spec, at most max_pending at once, and joins the cache; one running when
// the object ends is stopped.
TEST(GrammarBudget, AnOptionalCompileGoesOnAfterItsCallerStopsWaiting) {
  const GrammarVocab vocab(tiny_vocab());
  std::mt19937 rng(2);
  const auto enumeration = [&](int n, int len) {
    std::string s = R"({"enum":[)";
    for (int i = 0; i < n; ++i) {
      s += i ? ",\"" : "\"";
      for (int k = 0; k < len; ++k) s += char('a' + rng() % 26);
      s += '"';
    }
    return s + "]}";
  };
  const GrammarSpec slow{GrammarKind::kJsonSchema, enumeration(200, 100)}, other{GrammarKind::kJsonSchema, enumeration(200, 100)},
      heavy{GrammarKind::kJsonSchema, enumeration(1000, 200)};
  ProcessBudget b;
  b.cpu_seconds = 600;
  b.wall_seconds = 600;
  {
    LaterCompiles later(1);
    // Within its patience: compiled, and cached.
    const GrammarSpec quick{GrammarKind::kRegex, "[0-9]{3}"};
    const auto g = later.compile(vocab, quick, b, 600);
    ASSERT_TRUE(g);
    EXPECT_EQ(Grammar::cached(vocab, quick), g);
    // A failure within it is the caller's.
    try {
      later.compile(vocab, {GrammarKind::kRegex, "(unclosed"}, b, 600);
      ADD_FAILURE() << "no error";
    } catch (const GrammarError& e) {
      EXPECT_EQ(e.why(), GrammarFailure::kInvalid);
    }
    // Not within it: null, and it goes on. Asked again while it runs: the
    // same compile, not waited for (the first caller waited), so null at
    // once, whatever the patience.
    EXPECT_FALSE(later.compile(vocab, slow, b, 0));
    EXPECT_FALSE(later.compile(vocab, slow, b, 600));
    // Another while max_pending (1) run: none starts.
    EXPECT_FALSE(later.compile(vocab, other, b, 0));
    EXPECT_LE(later.running(), 1);
    // It ends in the cache (bounded wait: a sanitizer build is slow).
    for (int i = 0; i < 6000 && !Grammar::cached(vocab, slow); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(Grammar::cached(vocab, slow));
    EXPECT_EQ(later.compile(vocab, slow, b, 0), Grammar::cached(vocab, slow));
    EXPECT_EQ(later.running(), 0);
    EXPECT_FALSE(Grammar::cached(vocab, other));
    // One still running when the object ends is stopped (its child killed,
    // its thread joined): the destructor returns and nothing comes (this
    // compile takes seconds).
    EXPECT_FALSE(later.compile(vocab, heavy, b, 0));
    EXPECT_EQ(later.running(), 1);
  }
  EXPECT_FALSE(Grammar::cached(vocab, heavy));
}

// Through the engine on the tiny model: constrained requests batched with
// each other and with an unconstrained one get exactly the tokens they get
// alone, every output matches its constraint, and a grammar that has ended
// ends the completion (finish reason stop) before max_tokens.
TEST(GrammarEngine, ConstrainedRequestsAreExactAndValid) {
  const LlamaModel& m = *[] {
    static std::unique_ptr<LlamaModel> p = LlamaModel::load(test::tiny_model());
    return p.get();
  }();
  Engine e(m, test::engine_options(AttnMode::kTpp, 8, 2));
  const auto schema = e.compile_grammar({GrammarKind::kJsonSchema, kSchema});
  const auto regex = e.compile_grammar({GrammarKind::kRegex, "(the|a) (cat|dog) [0-9]{2,4}"});
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = m.tokenizer().encode("the cat sat on the mat", false, true);
    r.prompt.push_back(int32_t(260 + i));  // each its own last token
    r.max_tokens = 120;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;  // greedy and sampled
    r.sampling.seed = uint64_t(i);
    r.grammar = i < 3 ? schema : i < 5 ? regex : nullptr;
    reqs.push_back(r);
  }
  const auto alone = test::run_each(e, reqs);
  test::expect_same_tokens(test::run_all(e, reqs), alone, "constrained, batched vs alone");
  int complete = 0;
  for (int i = 0; i < 5; ++i) {
    const Completion& c = alone[size_t(i)].completions[0];
    SCOPED_TRACE(c.text);
    if (i < 3) {
      if (c.reason != FinishReason::kStop) continue;  // max_tokens inside a long string: a prefix only
      ++complete;
      const nlohmann::json j = nlohmann::json::parse(c.text, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << hex(c.text);
      expect_valid(j, c.text);
    } else {
      EXPECT_EQ(c.reason, FinishReason::kStop);
      EXPECT_TRUE(full_match(c.text, "(the|a) (cat|dog) [0-9]{2,4}"));
    }
  }
  EXPECT_GE(complete, 2) << "schema completions that reached the end";
}

// A completion may stop on max_tokens mid-grammar (OpenAI's "length"); the
// tokens it has are a prefix the grammar allows.
TEST(GrammarEngine, MaxTokensCutsAValidPrefix) {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  Engine e(*m, test::engine_options(AttnMode::kTpp, 4, 2));
  Request r;
  r.prompt = m->tokenizer().encode("a dog", false, true);
  r.max_tokens = 3;
  r.grammar = e.compile_grammar({GrammarKind::kRegex, "xyz[0-9]{20}"});
  const Result got = e.submit(r).wait();
  EXPECT_EQ(got.completions[0].reason, FinishReason::kLength);
  const std::string& t = got.completions[0].text;
  EXPECT_TRUE(std::string("xyz").compare(0, std::min<size_t>(3, t.size()), t, 0, std::min<size_t>(3, t.size())) == 0) << t;
}

// A grammar of the answer (Request::grammar_after_thought) in a thought the
// prompt opened: the thought's tokens are the unconstrained run's, and the
// grammar starts where the thought ends, whether the budget forces the close
// or the reply writes it. A token that would write the close and go on past
// it is not drawn (the grammar would not see its tail). Where the reply may
// open the thought itself, it may, and then the grammar waits the same way;
// a reply that does not is the grammar's from its first token. The same
// requests batched get the tokens they get alone.
TEST(GrammarEngine, AGrammarOfTheAnswerWaitsForTheThought) {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  const Tokenizer& tok = m->tokenizer();
  Engine e(*m, test::engine_options(AttnMode::kTpp, 8, 2));
  const std::string pattern = "(the|a) (cat|dog) [0-9]{2,4}";
  Request base;
  base.prompt = tok.encode("the cat sat on the mat", false, true);
  base.max_tokens = 40;
  base.sampling.temperature = 0;
  const std::vector<int32_t> free = e.submit(base).wait().completions[0].tokens;
  ASSERT_GE(free.size(), 12u);
  auto text_of = [&](std::span<const int32_t> ids) {
    std::string t;
    for (int32_t id : ids) t += tok.piece(id);
    return t;
  };
  // Token k whose text first writes `close` there (and nowhere before).
  auto first_written_at = [&](const std::string& close) -> size_t {
    const std::string t = text_of(free);
    const size_t at = t.find(close);
    size_t end = 0;
    for (size_t k = 0; k < free.size(); ++k)
      if ((end += tok.piece(free[k]).size()) >= at + close.size()) return at == std::string::npos ? free.size() : k;
    return free.size();
  };
  Request waits = base;
  waits.max_tokens = 64;  // room for the answer after the thought
  waits.grammar = e.compile_grammar({GrammarKind::kRegex, pattern});
  waits.grammar_after_thought = true;
  waits.think_open = true;
  waits.think_stop = "\x01\x02";  // never written
  waits.think_end = tok.encode("||", false, false);
  std::vector<Request> reqs;
  // 1. The budget closes the thought after 5 tokens; the answer follows it.
  Request budget = waits;
  budget.think_budget = 5;
  reqs.push_back(budget);
  // 2. The reply writes the close: the text of the first token (from the
  // 4th) of two or more bytes, found nowhere before it (this random model
  // writes bytes mostly).
  size_t k = 3;
  while (k + 2 < free.size() && (tok.piece(free[k]).size() < 2 || first_written_at(tok.piece(free[k])) != k)) ++k;
  ASSERT_LT(k + 2, free.size()) << "a token whose text is written first there";
  Request written = waits;
  written.think_stop = tok.piece(free[k]);
  reqs.push_back(written);
  // 3. A close that token k would write and go past (its text less its last
  // character, not a newline): token k is not drawn there.
  Request overrun = waits;
  overrun.think_stop = written.think_stop.substr(0, written.think_stop.size() - 1);
  ASSERT_NE(written.think_stop.back(), '\n');
  ASSERT_EQ(first_written_at(overrun.think_stop), k);
  reqs.push_back(overrun);
  // 4. The reply may open the thought itself (think_start: the free run's
  // first two tokens' text): its first tokens may be the grammar's or the
  // opening's; here it opens, thinks for its budget, and answers.
  Request opened = waits;
  opened.think_open = false;
  opened.think_start = tok.piece(free[0]) + tok.piece(free[1]);
  opened.think_budget = 3;
  reqs.push_back(opened);
  // 5. As 2, with what follows a close the reply writes (harmony's next
  // message start) forced before the answer.
  Request resumed = written;
  resumed.think_resume = tok.encode("##", false, false);
  reqs.push_back(resumed);
  const std::vector<Result> alone = test::run_each(e, reqs);
  test::expect_same_tokens(test::run_all(e, reqs), alone, "grammars of the answer, batched vs alone");

  const Completion& b = alone[0].completions[0];
  ASSERT_GE(b.tokens.size(), 5 + budget.think_end.size());
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin(), b.tokens.begin() + 5), std::vector<int32_t>(free.begin(), free.begin() + 5));
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin() + 5, b.tokens.begin() + 5 + long(budget.think_end.size())), budget.think_end);
  EXPECT_EQ(b.reason, FinishReason::kStop);
  EXPECT_TRUE(full_match(text_of(std::span(b.tokens).subspan(5 + budget.think_end.size())), pattern)) << b.text;

  const Completion& w = alone[1].completions[0];
  ASSERT_GT(w.tokens.size(), k + 1);
  EXPECT_EQ(std::vector<int32_t>(w.tokens.begin(), w.tokens.begin() + long(k) + 1),
            std::vector<int32_t>(free.begin(), free.begin() + long(k) + 1));
  EXPECT_EQ(w.reason, FinishReason::kStop);
  EXPECT_TRUE(full_match(text_of(std::span(w.tokens).subspan(k + 1)), pattern)) << w.text;

  {
    const Completion& o = alone[2].completions[0];
    ASSERT_GT(o.tokens.size(), k);
    EXPECT_EQ(std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + long(k)),
              std::vector<int32_t>(free.begin(), free.begin() + long(k)));
    EXPECT_NE(o.tokens[k], free[k]);
    const std::string t = text_of(o.tokens);
    const size_t at = t.find(overrun.think_stop);
    if (at != std::string::npos) {  // a later close, then the answer alone
      EXPECT_TRUE(full_match(t.substr(at + overrun.think_stop.size()), pattern)) << t;
    }
  }

  const Completion& o = alone[3].completions[0];
  ASSERT_GE(o.tokens.size(), 5 + opened.think_end.size());
  EXPECT_EQ(std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + 5), std::vector<int32_t>(free.begin(), free.begin() + 5));
  EXPECT_EQ(std::vector<int32_t>(o.tokens.begin() + 5, o.tokens.begin() + 5 + long(opened.think_end.size())),
            opened.think_end);
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_TRUE(full_match(text_of(std::span(o.tokens).subspan(5 + opened.think_end.size())), pattern)) << o.text;

  const Completion& r = alone[4].completions[0];
  const size_t after = k + 1 + resumed.think_resume.size();
  ASSERT_GT(r.tokens.size(), after);
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + long(k) + 1),
            std::vector<int32_t>(free.begin(), free.begin() + long(k) + 1));
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + long(k) + 1, r.tokens.begin() + long(after)), resumed.think_resume);
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_TRUE(full_match(text_of(std::span(r.tokens).subspan(after)), pattern)) << r.text;

  // 6. Openings the reply may or may not write (this random model likes some
  // control bytes): one it writes is a thought, then the answer; one it does
  // not leaves the reply the grammar's from its first token, the same tokens
  // as the constraint over the whole reply.
  Request whole = base;
  whole.max_tokens = waits.max_tokens;
  whole.grammar = waits.grammar;
  const std::vector<int32_t> plain = e.submit(whole).wait().completions[0].tokens;
  int not_written = 0;
  for (char c : std::string("\x01\x05\x10\x7f~`|#")) {
    Request maybe = opened;
    maybe.think_start = std::string(1, c) + "\x02\x03";
    const Completion got = e.submit(maybe).wait().completions[0];
    const std::string t = text_of(got.tokens);
    SCOPED_TRACE(int(c));
    if (t.starts_with(maybe.think_start)) {
      const size_t at = t.find("||");
      ASSERT_NE(at, std::string::npos) << t;
      EXPECT_TRUE(full_match(t.substr(at + 2), pattern)) << t;
    } else {
      ++not_written;
      EXPECT_EQ(got.tokens, plain);
    }
  }
  EXPECT_GT(not_written, 0);
}

// An EBNF literal of ASCII text (bytes below 0x20 escaped).
std::string ascii_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20) out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else out += char(c);
  }
  return out + "\"";
}

bool ascii(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c > 0 && static_cast<unsigned char>(c) < 0x80; });
}

// A grammar with triggers (Request::grammar_triggers, tool_choice "auto"):
// the reply is the unconstrained run's until a trigger is written; from
// there (its first character, or just after it) the grammar constrains the
// rest. A token that writes the trigger and goes on with text the grammar
// refuses is drawn again without it; a trigger never written leaves the
// reply free; one at the start counts only there; one written in a thought
// is not a trigger, and one in the answer after it is. Batched as alone.
TEST(GrammarEngine, ATriggeredGrammarWaitsForItsTrigger) {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(test::tiny_model());
  const Tokenizer& tok = m->tokenizer();
  Engine e(*m, test::engine_options(AttnMode::kTpp, 8, 2));
  Request base;
  base.prompt = tok.encode("the cat sat on the mat", false, true);
  base.max_tokens = 60;
  base.sampling.temperature = 0;
  const std::vector<int32_t> free = e.submit(base).wait().completions[0].tokens;
  ASSERT_GE(free.size(), 20u);
  auto text_of = [&](std::span<const int32_t> ids) {
    std::string t;
    for (int32_t id : ids) t += tok.piece(id);
    return t;
  };
  const std::string free_text = text_of(free);
  auto offset = [&](size_t k) { return text_of(std::span(free).first(k)).size(); };
  // Token k (from the 3rd) whose ASCII text of two or more bytes is written
  // first there: its first byte is a trigger the token goes on past.
  size_t k = 2;
  while (k < free.size() && (tok.piece(free[k]).size() < 2 || !ascii(tok.piece(free[k])) ||
                             free_text.find(tok.piece(free[k]).substr(0, 1)) != offset(k)))
    ++k;
  ASSERT_LT(k + 1, free.size()) << "an ASCII token of two bytes whose first is written first there";
  const std::string piece = tok.piece(free[k]);
  const std::string tail = R"(("cat" | "dog") " " [0-9] [0-9] [0-9]?)";
  const std::string tail_re = "(cat|dog) [0-9]{2,3}";
  Request lazy = base;
  // 1. The trigger is token k's whole text: the grammar takes it, and the rest.
  lazy.grammar = e.compile_grammar({GrammarKind::kEbnf, "root ::= " + ascii_literal(piece) + " " + tail});
  lazy.grammar_triggers = {{piece}};
  std::vector<Request> reqs = {lazy};
  // 2. The same grammar after its trigger.
  Request after = base;
  after.grammar = e.compile_grammar({GrammarKind::kEbnf, "root ::= " + tail});
  after.grammar_triggers = {{piece, false, piece.size()}};
  reqs.push_back(after);
  // 3. The trigger is token k's first byte, which the grammar must be
  // followed by "cat" or "dog": token k is drawn again.
  Request refused = base;
  const std::string first(1, piece[0]);
  ASSERT_TRUE(piece[1] != 'c' && piece[1] != 'd') << piece;
  refused.grammar = e.compile_grammar({GrammarKind::kEbnf, "root ::= " + ascii_literal(first) + " " + tail});
  refused.grammar_triggers = {{first}};
  reqs.push_back(refused);
  // 4. Triggers never written, and one written but not at the start.
  Request never = base;
  never.grammar = lazy.grammar;
  never.grammar_triggers = {{"\x01\x02\x03\x04"}, {piece, true}};
  ASSERT_EQ(free_text.find("\x01\x02\x03\x04"), std::string::npos);
  ASSERT_NE(free_text.find_first_not_of(" \t\r\n"), offset(k));
  reqs.push_back(never);
  const std::vector<Result> alone = test::run_each(e, reqs);
  test::expect_same_tokens(test::run_all(e, reqs), alone, "triggered grammars, batched vs alone");

  auto expect_prefix = [&](const Completion& c, size_t n) {
    ASSERT_GE(c.tokens.size(), n);
    EXPECT_EQ(std::vector<int32_t>(c.tokens.begin(), c.tokens.begin() + long(n)),
              std::vector<int32_t>(free.begin(), free.begin() + long(n)));
  };
  const Completion& l = alone[0].completions[0];
  expect_prefix(l, k + 1);
  EXPECT_EQ(l.reason, FinishReason::kStop);
  EXPECT_TRUE(full_match(text_of(std::span(l.tokens).subspan(k + 1)), tail_re)) << l.text;
  const Completion& a = alone[1].completions[0];
  EXPECT_EQ(a.tokens, l.tokens);  // the same constraint from the same place
  const Completion& r = alone[2].completions[0];
  expect_prefix(r, k);
  ASSERT_GT(r.tokens.size(), k);
  EXPECT_NE(r.tokens[k], free[k]);
  const std::string rt = text_of(r.tokens);
  if (rt.find(first, offset(k)) != std::string::npos) {  // written later: the grammar's from there
    EXPECT_TRUE(full_match(rt.substr(rt.find(first, offset(k))), first + tail_re)) << rt;
    EXPECT_EQ(r.reason, FinishReason::kStop);
  }
  EXPECT_EQ(alone[3].completions[0].tokens, free);

  // 5. In a thought (opened by the prompt; the budget closes it after 6
  // tokens with "||"): a trigger of the thought's text is none, one of the
  // answer's is.
  Request thinks = base;
  thinks.think_open = true;
  thinks.think_stop = "\x01\x02";
  thinks.think_end = tok.encode("||", false, false);
  thinks.think_budget = 6;
  const std::vector<int32_t> thought_run = e.submit(thinks).wait().completions[0].tokens;
  const size_t answer_at = 6 + thinks.think_end.size();
  ASSERT_GT(thought_run.size(), answer_at + 4);
  const std::string answer = text_of(std::span(thought_run).subspan(answer_at));
  Request in_thought = thinks;
  in_thought.grammar = e.compile_grammar({GrammarKind::kEbnf, "root ::= \"~~~\""});
  in_thought.grammar_after_thought = true;
  size_t j = 0;
  while (j < 6 && (!ascii(tok.piece(thought_run[j])) || answer.find(tok.piece(thought_run[j])) != std::string::npos)) ++j;
  ASSERT_LT(j, 6u) << "a thought's token whose text the answer does not write";
  in_thought.grammar_triggers = {{tok.piece(thought_run[j])}};
  EXPECT_EQ(e.submit(in_thought).wait().completions[0].tokens, thought_run);
  Request in_answer = in_thought;
  size_t q = answer_at + 1;
  const std::string thought_text = text_of(std::span(thought_run).first(answer_at));
  while (q < thought_run.size() &&
         (!ascii(tok.piece(thought_run[q])) || text_of(std::span(thought_run).first(q + 1)).find(tok.piece(thought_run[q])) <
                                                   text_of(std::span(thought_run).first(q)).size()))
    ++q;
  ASSERT_LT(q, thought_run.size()) << "an answer's token whose text is written first there";
  const std::string trig = tok.piece(thought_run[q]);
  in_answer.grammar = e.compile_grammar({GrammarKind::kEbnf, "root ::= " + ascii_literal(trig) + " \"~~~\""});
  in_answer.grammar_triggers = {{trig}};
  const Completion ia = e.submit(in_answer).wait().completions[0];
  ASSERT_GE(ia.tokens.size(), q + 1);
  EXPECT_EQ(std::vector<int32_t>(ia.tokens.begin(), ia.tokens.begin() + long(q) + 1),
            std::vector<int32_t>(thought_run.begin(), thought_run.begin() + long(q) + 1));
  EXPECT_EQ(text_of(std::span(ia.tokens).subspan(q + 1)), "~~~");
  EXPECT_EQ(ia.reason, FinishReason::kStop);
}

}  // namespace
}  // namespace cs
