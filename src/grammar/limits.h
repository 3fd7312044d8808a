// What a constraint may ask of the grammar compiler, checked before it runs:
// compile time and memory grow with a schema's depth and size, a regex's
// nesting and alternatives, a grammar's rules, and the compiler recurses
// once per level (a schema 20,000 levels deep overflowed a thread's stack).
// The limits sit well above what real schemas, tools and grammars use; each
// refusal is a GrammarError naming the limit (a 400 from the server). The
// compile itself still runs under a time and memory budget (grammar.h).
// README, "Security", lists them.
#pragma once
#include <cstddef>
#include <string_view>

namespace cs {

struct GrammarSpec;

inline constexpr size_t kMaxSchemaBytes = 256 << 10;   // a schema's JSON text
inline constexpr int kMaxSchemaDepth = 32;             // subschemas within subschemas
inline constexpr int kMaxSchemaNodes = 4096;           // subschemas in all
inline constexpr int kMaxEnumValues = 1024;            // values of one enum
inline constexpr int kMaxProperties = 1024;            // properties of one object
inline constexpr size_t kMaxRegexBytes = 16 << 10;     // a regex (or a schema's pattern)
inline constexpr int kMaxRegexDepth = 32;              // groups within groups
inline constexpr int kMaxRegexAlternatives = 1024;     // '|' in one regex
inline constexpr size_t kMaxGrammarBytes = 64 << 10;   // an EBNF grammar
inline constexpr int kMaxGrammarRules = 1024;          // its rules
inline constexpr int kMaxGrammarDepth = 32;            // ( and [ within each other

// Throws GrammarError when the spec's text is over a limit (its kind's; a
// schema's own limits are checked by check_schema, grammar/schema_check.h).
void check_limits(const GrammarSpec& spec);
// A regex's limits (also each pattern inside a schema); `what` names it in
// the message ("the regex", "pattern \"...\"").
void check_regex_limits(std::string_view regex, std::string_view what);

}  // namespace cs
