#include "grammar/limits.h"

#include <algorithm>
#include <string>

#include "grammar/grammar.h"

namespace cs {
namespace {

[[noreturn]] void over(std::string_view what, const std::string& how, long long limit, const char* unit) {
  throw GrammarError(std::string(what) + " " + how + "; at most " + std::to_string(limit) + " " + unit +
                     " are compiled");
}

}  // namespace

void check_regex_limits(std::string_view re, std::string_view what) {
  if (re.size() > kMaxRegexBytes) over(what, "is " + std::to_string(re.size()) + " bytes", kMaxRegexBytes, "bytes");
  int depth = 0, most = 0, alternatives = 0;
  bool escaped = false, in_class = false;
  for (char c : re) {
    if (escaped) {
      escaped = false;
    } else if (c == '\\') {
      escaped = true;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      most = std::max(most, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    } else if (c == '|') {
      ++alternatives;
    }
  }
  if (most > kMaxRegexDepth) over(what, "nests groups " + std::to_string(most) + " deep", kMaxRegexDepth, "levels");
  if (alternatives > kMaxRegexAlternatives)
    over(what, "has " + std::to_string(alternatives) + " alternatives", kMaxRegexAlternatives, "alternatives");
}

void check_limits(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kAnyJson:
      return;
    case GrammarKind::kJsonSchema:
      if (spec.text.size() > kMaxSchemaBytes)
        over("the schema", "is " + std::to_string(spec.text.size()) + " bytes", kMaxSchemaBytes, "bytes");
      return;  // the rest: check_schema
    case GrammarKind::kRegex:
      check_regex_limits(spec.text, "the regex");
      return;
    case GrammarKind::kEbnf:
      break;
  }
  const std::string& g = spec.text;
  if (g.size() > kMaxGrammarBytes) over("the grammar", "is " + std::to_string(g.size()) + " bytes", kMaxGrammarBytes, "bytes");
  // Rules are "name ::= ...": count the "::=" outside strings and
  // character classes; nesting counts ( groups the same way.
  int rules = 0, depth = 0, most = 0;
  char quote = 0;  // '"', '\'' or '[' (a class) while inside one
  bool escaped = false;
  for (size_t i = 0; i < g.size(); ++i) {
    const char c = g[i];
    if (quote) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == (quote == '[' ? ']' : quote)) quote = 0;
    } else if (c == '"' || c == '\'' || c == '[') {
      quote = c;
    } else if (c == '(') {
      most = std::max(most, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    } else if (c == ':' && g.compare(i, 3, "::=") == 0) {
      ++rules;
    }
  }
  if (rules > kMaxGrammarRules) over("the grammar", "has " + std::to_string(rules) + " rules", kMaxGrammarRules, "rules");
  if (most > kMaxGrammarDepth)
    over("the grammar", "nests groups " + std::to_string(most) + " deep", kMaxGrammarDepth, "levels");
}

}  // namespace cs
