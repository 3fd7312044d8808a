// Tokens -> syntax tree, with jinja2's grammar and operator precedence
// (conditional < or < and < not < comparisons < + - < ~ < * / // % < ** <
// unary, filters and tests). Statements: if/elif/else, for (with else, a
// loop filter and tuple targets), set (names, tuples, namespace attributes,
// blocks), macro, filter blocks, break/continue, and HF's generation block.
#pragma once
#include <string_view>

#include "jinja/ast.h"

namespace cs::jinja {

// Throws TemplateError{kSyntax} naming the line and the construct.
Body parse(std::string_view source);

}  // namespace cs::jinja
