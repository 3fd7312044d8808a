// A schema laid out (Prompt Cache §3.2-3.3): every token of it with a fixed
// position ID. A cursor walks the schema in document order from 0: text
// advances it by its token count, a parameter by its length, a module by the
// sum of its children, a union by its longest member (every member is laid
// out from the union's start). Role blocks become the model's chat-template
// markers around their content.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "pml/pml.h"

namespace cs::pml {

// Turns text into token ids (no BOS); `special` parses special-token text
// (the chat template's markers) as tokens.
using Encoder = std::function<std::vector<int32_t>(const std::string& text, bool special)>;
// A role's opening and closing text in the model's chat template.
using RoleMarkers = std::function<std::pair<std::string, std::string>(const std::string& role)>;

struct Segment {
  enum class Kind { kText, kParameter };
  Kind kind = Kind::kText;
  std::vector<int32_t> tokens;  // kText: the text's tokens
  int start = 0;                // its first position ID
  int length = 0;               // positions it occupies (kParameter: the parameter's length)
  int module = 0;               // index in Layout::modules of the innermost module holding it
  std::string param;            // kParameter: its name
  std::string scaffold;         // kParameter: the placeholder text it is encoded with
};

struct ModuleLayout {
  std::string name;
  std::string path;             // "schema/outer/inner": unique in the schema
  int parent = -1;              // index of the enclosing module (-1: the schema itself)
  int union_id = -1;            // the union it is a member of (-1: none), numbered in document order
  bool cache = true;            // false: recomputed per prompt (cache="false" here or above)
  bool scaffold = true;         // in the default scaffold (union members: the union's scaffold member)
  int start = 0, length = 0;    // positions
  std::vector<int> segments;    // its own segments (not its child modules'), in order
  std::vector<int> children;    // child modules, in order
  const Node* node = nullptr;
};

struct Layout {
  std::string schema;
  int length = 0;                      // positions of the whole schema
  std::vector<Segment> segments;       // document order
  std::vector<ModuleLayout> modules;   // modules[0] is the schema; document order
  int unions = 0;

  // The module `name` among the children of module `parent`; -1 if none.
  int child(int parent, const std::string& name) const;
  // Token count of a module's own text and parameters and those of its children.
  int tokens_of(int module) const;
};

// `start`: the tokens the model wants first (its BOS, or none), part of the
// schema's always-included text. Throws PmlError (e.g. a parameter's
// scaffold longer than its length).
Layout lay_out(const Schema& s, const Encoder& encode, const RoleMarkers& roles, std::vector<int32_t> start = {});

// The layout as a table (what `chunkserve pml check` prints).
std::string describe(const Layout& l);

}  // namespace cs::pml
