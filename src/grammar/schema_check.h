// A JSON schema checked before it is compiled, so that a mistake comes back
// naming where it is: "at /properties/address/properties/zip: type 'strng'
// is not a JSON type". The grammar engine's own messages name the problem
// but not its place; this walk finds the place for the mistakes clients
// make (unknown types, patterns that are no regex, $refs that lead nowhere,
// keywords of the wrong kind). What it does not catch, the engine still
// refuses with its own message.
//
// A schema that constrains output is also checked for what the engine would
// drop without a word (xgrammar 0.2.8 logs a warning at most): `not`,
// `if`, `uniqueItems`, `contains`, `dependentRequired`, an `allOf` of several
// schemas (compiled as any JSON), keywords beside `$ref`, `enum`, `const`,
// `anyOf` or `oneOf` (only that keyword is compiled), a number's
// `multipleOf`, lengths beside `pattern` or a built-in format, and a type's
// keywords in a schema without "type" (compiled as any JSON). Output is
// valid against the schema by construction, so such a schema is refused,
// naming the keyword, rather than answered with JSON that may break it.
#pragma once
#include <string>

namespace cs {

// kConstraint: the schema constrains what is sampled (response_format, a
// demanded tool call), so it must also be one the engine enforces whole.
// kDescription: it only describes (a tool's parameters the model may use).
enum class SchemaUse { kConstraint, kDescription };

// Throws GrammarError ("at PATH: why") for the first problem found; PATH is
// a JSON pointer into the schema ("" for its root, shown as "/").
void check_schema(const std::string& schema_text, SchemaUse use);

}  // namespace cs
