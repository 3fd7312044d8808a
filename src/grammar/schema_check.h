// A JSON schema checked before it is compiled, so that a mistake comes back
// naming where it is: "at /properties/address/properties/zip: type 'strng'
// is not a JSON type". The grammar engine's own messages name the problem
// but not its place; this walk finds the place for the mistakes clients
// make (unknown types, patterns that are no regex, $refs that lead nowhere,
// keywords of the wrong kind). What it does not catch, the engine still
// refuses with its own message.
#pragma once
#include <string>

namespace cs {

// Throws GrammarError ("at PATH: why") for the first problem found; PATH is
// a JSON pointer into the schema ("" for its root, shown as "/").
void check_schema(const std::string& schema_text);

}  // namespace cs
