// Prompt Markup Language (Prompt Cache §3, ../shared/pml/SPEC.md): schemas
// that declare reusable prompt modules, and prompts that import them. Parsed
// with pugixml into the trees below; every error names the file, line and
// column. PML must be well-formed XML: text with a bare '<' (code samples) is
// rejected with the line and column it is at; write &lt;, or wrap the text in
// <![CDATA[ ... ]]>. A bare '&' that starts no entity is kept as text.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "base/error.h"

namespace cs::pml {

struct Location {
  std::string file;
  int line = 0, column = 0;
  std::string str() const;  // "file:line:column"
};

// An error in a schema or a prompt: "file:line:column: problem".
class PmlError : public Error {
 public:
  PmlError(const Location& at, const std::string& problem) : Error(at.str() + ": " + problem), at_(at) {}
  const Location& where() const { return at_; }

 private:
  Location at_;
};

// A schema node. The schema itself is a kModule node (always included).
struct Node {
  enum class Kind { kText, kModule, kUnion, kParameter, kRole };
  Kind kind = Kind::kText;
  std::string text;      // kText: the text, whitespace normalised
  std::string name;      // kModule, kParameter; kRole: system, user or assistant
  bool cache = true;     // kModule: cache="false" recomputes it per prompt
  std::string scaffold;  // kUnion: the member encoded with the rest; kParameter: placeholder text
  int length = 0;        // kParameter: positions it reserves (its value's most tokens)
  std::vector<Node> children;
  Location at;
};

struct Schema {
  std::string name;
  Node root;  // kModule named after the schema
};

// A prompt: module imports (with parameter values, nested imports picking
// union members) and new text, in document order.
struct Import {
  std::string module;
  std::map<std::string, std::string> args;  // parameter values
  std::vector<Import> children;
  Location at;
};

struct PromptItem {
  enum class Kind { kImport, kText, kRole };
  Kind kind = Kind::kText;
  Import import;                  // kImport
  std::string text;               // kText
  std::string role;               // kRole: system, user or assistant
  std::vector<PromptItem> children;  // kRole: its text (role blocks hold text only)
  Location at;
};

struct Prompt {
  std::string schema;
  std::vector<PromptItem> items;
  Location at;
};

// Whitespace of a text node as the spec says: a leading or trailing run of
// whitespace becomes one space; inner whitespace is kept.
std::string normalize_space(const std::string& text);

// Parses a schema. `file` names it in errors; `src` attributes are read
// relative to `base_dir`. Throws PmlError.
Schema parse_schema(const std::string& xml, const std::string& file, const std::string& base_dir = ".");
Schema parse_schema_file(const std::string& path);
// The schema as self-contained PML (src= files inlined): parse_schema of it
// gives the same tree.
std::string to_pml(const Schema& s);

// Parses a prompt. Throws PmlError.
Prompt parse_prompt(const std::string& xml, const std::string& file = "<prompt>");

}  // namespace cs::pml
