// Splits Jinja source into tokens the way jinja2 does with the settings HF
// chat templates are written for: trim_blocks and lstrip_blocks on, a
// single trailing newline dropped, newlines normalised to "\n", "-" and "+"
// whitespace control on either side of a tag. Comments vanish; {% raw %}
// blocks come out as text.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace cs::jinja {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kInt, kFloat, kString, kOp, kEof };

struct Token {
  Tok kind;
  std::string text;  // the text, name, literal's value (unescaped) or operator
  int line;
};

// Throws TemplateError (jinja/error.h) for an unclosed tag or string.
std::vector<Token> lex(std::string_view source);

}  // namespace cs::jinja
