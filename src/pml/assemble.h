// A prompt resolved against its schema's layout (Prompt Cache §3.4): which
// modules it imports, and every token it needs, in position order, marked as
// served from the schema's cached K/V or computed at request time (parameter
// values, modules with cache="false", new text). New text (role blocks and
// free text of the prompt) is positioned after the whole schema, in order.
#pragma once
#include <string>
#include <vector>

#include "pml/layout.h"

namespace cs::pml {

struct Piece {
  enum class Kind { kCached, kParameter, kUncached, kNew };
  Kind kind = Kind::kCached;
  std::vector<int32_t> tokens;
  int start = 0;     // position ID of its first token (the rest follow contiguously)
  int segment = -1;  // kCached, kUncached: the layout segment; kParameter: the parameter's segment
};

struct Assembly {
  std::vector<int> modules;  // imported modules (the schema first), by layout index
  std::vector<Piece> pieces; // position order
  int tokens() const;
  // The same tokens in order with contiguous positions: the prompt computed
  // from scratch (the quality baseline, --no-cache).
  std::vector<int32_t> flat() const;
};

// Throws PmlError naming the offending module, union or parameter (and the
// prompt's line): a schema that is not this one, an unknown module, two
// members of one union, an unknown parameter, a value longer than its
// parameter. `reply_start` (the chat template's, or empty) ends the prompt.
Assembly assemble(const Layout& layout, const Prompt& prompt, const Encoder& encode, const RoleMarkers& roles,
                  const std::string& reply_start);

}  // namespace cs::pml
