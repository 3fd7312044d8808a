#include "engine/prompt_request.h"

namespace cs {

using pml::Piece;

Request prompt_request(const pml::EncodedSchema& e, const pml::Assembly& a, bool use_cache) {
  Request r;
  for (const Piece& p : a.pieces) {
    const bool last = &p == &a.pieces.back();  // its last token must run: its logits sample the reply
    const int begin = int(r.prompt.size());
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      r.prompt.push_back(p.tokens[i]);
      r.positions.push_back(use_cache ? p.start + int32_t(i) : int32_t(r.positions.size()));
    }
    if (use_cache && !last && p.kind == Piece::Kind::kCached && !e.chunks[size_t(p.segment)].empty())
      r.cached.push_back({begin, int(r.prompt.size()), e.chunks[size_t(p.segment)]});
  }
  return r;
}

}  // namespace cs
