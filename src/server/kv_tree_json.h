// GET /v1/kv/tree: the engine's KV tree snapshot as JSON (documented in the
// README's web console section), its token runs detokenized for people.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/tokenizer.h"

namespace cs {

// At most max_nodes nodes (parents before children, so a cut keeps the
// shape); each node's text is its first text_tokens tokens.
nlohmann::json kv_tree_json(const KvTreeSnapshot& t, const Tokenizer& tok, int max_nodes, int text_tokens);

}  // namespace cs
