#include "server/kv_tree_json.h"

#include <algorithm>
#include <chrono>

namespace cs {

using nlohmann::json;

namespace {

const char* state_name(TreeViewNode::State s) {
  switch (s) {
    case TreeViewNode::State::kLive: return "live";
    case TreeViewNode::State::kCached: return "cached";
    case TreeViewNode::State::kPinned: return "pinned";
    case TreeViewNode::State::kPrivate: return "private";
  }
  return "?";
}

}  // namespace

json kv_tree_json(const KvTreeSnapshot& t, const Tokenizer& tok, int max_nodes, int text_tokens) {
  const TreeView& v = t.view;
  const EngineStats& s = t.stats;
  const size_t chunk_bytes = s.kv.chunk_bytes;
  json nodes = json::array();
  int omitted = v.omitted_chunks;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    const TreeViewNode& n = v.nodes[i];
    if (int(i) >= max_nodes) {
      omitted += n.chunks;
      continue;
    }
    const size_t shown = std::min(n.head.size(), size_t(std::max(0, text_tokens)));
    std::string text = tok.decode(std::span(n.head.data(), shown), /*render_special=*/true);
    if (shown > 0 && shown < size_t(n.tokens)) text += "\u2026";
    nodes.push_back({{"id", i},
                     {"parent", n.parent},
                     {"state", state_name(n.state)},
                     {"chunks", n.chunks},
                     {"tokens", n.tokens},
                     {"readers", n.readers},
                     {"uses", n.uses},
                     {"on_disk", n.on_disk},
                     {"text", text}});
  }
  json sources = json::object();
  uint64_t drafted = 0, accepted = 0;
  for (DraftSource src : kDraftKinds) {
    sources[draft_source_name(src)] = {{"drafted", s.drafted[int(src)]}, {"accepted", s.draft_accepted[int(src)]}};
    drafted += s.drafted[int(src)];
    accepted += s.draft_accepted[int(src)];
  }
  const auto age = std::chrono::steady_clock::now() - t.at;
  return {{"object", "kv.tree"},
          {"chunk_size", t.chunk_size},
          {"age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(age).count()},
          {"kv",
           {{"chunks", s.kv.chunks},
            {"used", s.kv.used},
            {"cached", s.kv.cached},
            {"pinned", s.kv.pinned},
            {"free", s.kv.free},
            {"chunk_bytes", chunk_bytes},
            {"bytes", s.kv.bytes}}},
          {"disk", s.disk_on ? json{{"files", s.disk.files},
                                     {"bytes", s.disk.bytes},
                                     {"capacity_bytes", s.disk.capacity_bytes},
                                     {"writable", s.disk.writable}}
                             : json(nullptr)},
          {"sharing",
           {{"live_sequences", v.live_sequences},
            {"held_bytes", size_t(v.held_chunks) * chunk_bytes},
            {"unshared_bytes", size_t(v.unshared_chunks) * chunk_bytes}}},
          {"requests",
           {{"running", s.running},
            {"waiting", s.waiting},
            {"finished", s.finished},
            {"prompt_tokens", s.prompt_tokens},
            {"prompt_tokens_cached", s.prompt_tokens_cached},
            {"prompt_tokens_disk", s.prompt_tokens_disk},
            {"generated_tokens", s.generated_tokens}}},
          {"speculation", {{"drafted", drafted}, {"accepted", accepted}, {"sources", sources}}},
          {"nodes", nodes},
          {"omitted_chunks", omitted}};
}

}  // namespace cs
