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
  PmlError(const Location& at, const std::string& problem, ErrorKind kind = ErrorKind::kInvalid)
      : Error(Status{kind, problem, at.str()}), at_(at) {}
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

// Where <module src="FILE"> may read its text from (src_files.cpp). A schema
// sent over HTTP comes from a client, so by default its src= is refused: it
// must not read the server's files. The operator may name one directory
// (serve --pml-src-dir): then only regular files below it, reached without a
// symbolic link or "..", at most max_bytes. The CLI reads files relative to
// the schema file (regular files, capped the same).
struct SrcFiles {
  enum class Mode { kRefuse, kRelative, kConfined };
  static constexpr size_t kMaxBytes = 1 << 20;
  Mode mode = Mode::kRefuse;
  std::string dir;
  size_t max_bytes = kMaxBytes;

  static SrcFiles refuse() { return {}; }
  static SrcFiles relative_to(std::string dir) { return {Mode::kRelative, std::move(dir), kMaxBytes}; }
  static SrcFiles confined_to(std::string dir) { return {Mode::kConfined, std::move(dir), kMaxBytes}; }
  // The text of `path` as this policy allows; throws PmlError at `at`.
  std::string read(const std::string& path, const Location& at) const;
};

// Parses a schema. `file` names it in errors; `src` attributes are read as
// `files` allows (by default: refused). Throws PmlError.
Schema parse_schema(const std::string& xml, const std::string& file, const SrcFiles& files = SrcFiles::refuse());
Schema parse_schema_file(const std::string& path);
// The schema as self-contained PML (src= files inlined): parse_schema of it
// gives the same tree.
std::string to_pml(const Schema& s);

// Parses a prompt. Throws PmlError.
Prompt parse_prompt(const std::string& xml, const std::string& file = "<prompt>");

}  // namespace cs::pml
