#include "pml/encode.h"

#include <atomic>
#include <chrono>
#include <map>

#include "engine/prefix_kv.h"
#include "model/chat_template.h"

namespace cs::pml {

TextModel text_model(const LlamaModel& model) {
  const Tokenizer& tok = model.tokenizer();
  const ChatTemplate chat = ChatTemplate::detect(tok.chat_template(), tok.model());
  TextModel tm;
  tm.encode = [&tok](const std::string& t, bool special) { return tok.encode(t, special, false); };
  tm.roles = [chat](const std::string& r) { return chat.role_markers(r); };
  tm.bos = tok.encode("", false, true);
  tm.reply_start = chat.reply_start();
  // Placeholders: a space, which does not change a text's meaning (the
  // paper's reason for padding); the paper's <unk> is <|endoftext|> in
  // byte-level vocabularies like SmolLM2's, a document boundary the model
  // reads as one (the quality report measured it: every travel prompt's
  // first token differed). Else the unknown token, else id 0.
  tm.pad = 0;
  const auto space = tok.encode(" ", false, false);
  if (space.size() == 1) {
    tm.pad = space[0];
  } else {
    const auto unk = tok.encode("<unk>", true, false);
    if (unk.size() == 1) tm.pad = unk[0];
  }
  return tm;
}

uint64_t new_pin_group() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

namespace {

// For module m, the module whose scaffold computes its segments: the
// nearest module around it (itself included) that is not in the default
// scaffold, or the schema (0).
int owner_of(const Layout& l, int m) {
  for (int a = m; a > 0; a = l.modules[size_t(a)].parent)
    if (!l.modules[size_t(a)].scaffold) return a;
  return 0;
}

// The modules of the scaffold of `owner` (0: the default one): every module
// whose union memberships are all picked, each union picking its scaffold
// member unless `owner` or a module around it is a member.
std::vector<bool> scaffold_modules(const Layout& l, int owner) {
  std::map<int, int> pick;  // union -> member
  for (int a = owner; a > 0; a = l.modules[size_t(a)].parent)
    if (l.modules[size_t(a)].union_id >= 0) pick[l.modules[size_t(a)].union_id] = a;
  std::vector<bool> in(l.modules.size(), false);
  in[0] = true;
  for (size_t m = 1; m < l.modules.size(); ++m) {
    const ModuleLayout& ml = l.modules[m];
    bool ok = in[size_t(ml.parent)];
    if (ok && ml.union_id >= 0) {
      const auto p = pick.find(ml.union_id);
      ok = p != pick.end() ? p->second == int(m) : ml.scaffold;
    }
    in[m] = ok;
  }
  return in;
}

}  // namespace

std::unique_ptr<EncodedSchema> encode_schema(Schema s, const LlamaModel& model, PrefixTree& tree, const TextModel& tm,
                                             const std::function<void(int, int)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  auto e = std::make_unique<EncodedSchema>();
  e->schema = std::move(s);
  e->layout = lay_out(e->schema, tm.encode, tm.roles, tm.bos);
  const Layout& l = e->layout;
  e->chunks.resize(l.segments.size());
  // One scaffold for the default and one per module that is not in it.
  std::vector<int> owners = {0};
  for (int m = 1; m < int(l.modules.size()); ++m)
    if (!l.modules[size_t(m)].scaffold) owners.push_back(m);
  e->scaffolds = int(owners.size());
  std::vector<std::vector<bool>> included;
  int total = 0;
  for (int o : owners) {
    included.push_back(scaffold_modules(l, o));
    for (const Segment& seg : l.segments)
      if (included.back()[size_t(seg.module)]) total += seg.length;
  }
  const KvLayout& L = tree.layout();
  const LlamaConfig& c = model.config();
  const int cs = L.chunk_size;
  Workspace ws;
  std::vector<float> logits;
  std::vector<float> k(size_t(L.head_dim)), v(size_t(L.head_dim));
  int done = 0;
  try {
    for (size_t si = 0; si < owners.size(); ++si) {
      // The scaffold's tokens in position order (segments are in document
      // order, which is position order within a scaffold).
      std::vector<int32_t> toks, pos;
      std::vector<std::pair<int, int>> where(l.segments.size(), {-1, 0});  // segment -> (first token, count)
      for (size_t g = 0; g < l.segments.size(); ++g) {
        const Segment& seg = l.segments[g];
        if (!included[si][size_t(seg.module)]) continue;
        std::vector<int32_t> t = seg.tokens;
        if (seg.kind == Segment::Kind::kParameter) {
          t = seg.scaffold.empty() ? std::vector<int32_t>() : tm.encode(seg.scaffold, false);
          t.resize(size_t(seg.length), tm.pad);
        }
        where[g] = {int(toks.size()), int(t.size())};
        for (size_t i = 0; i < t.size(); ++i) {
          toks.push_back(t[i]);
          pos.push_back(seg.start + int32_t(i));
        }
      }
      if (toks.empty()) continue;
      const size_t scratch_chunks = toks.size() / size_t(cs) + 2;
      PrefixKv scratch(L, L.chunk_bytes() * scratch_chunks, c.n_heads, AttnPath::kPerSequence, false);
      int m = 0;
      (void)scratch.join(0, {}, &m);
      for (size_t b = 0; b < toks.size(); b += 512) {
        Batch batch;
        for (size_t i = b; i < std::min(toks.size(), b + 512); ++i) batch.add(toks[i], pos[i], 0, false);
        model.forward(batch, scratch, ws, logits);
        done += batch.size();
        if (progress) progress(done, total);
      }
      // Store the segments this scaffold owns: cached text of its modules.
      for (size_t g = 0; g < l.segments.size(); ++g) {
        const Segment& seg = l.segments[g];
        const ModuleLayout& ml = l.modules[size_t(seg.module)];
        if (where[g].first < 0 || seg.kind != Segment::Kind::kText || !ml.cache) continue;
        if (owner_of(l, seg.module) != owners[si]) continue;
        const uint64_t group = new_pin_group();
        for (int off = 0; off < where[g].second; off += cs) {
          const int n = std::min(cs, where[g].second - off);
          const ChunkId ch = tree.pin(std::span(seg.tokens).subspan(size_t(off), size_t(n)), group);
          if (ch < 0) throw Error("the KV pool has no room for schema '" + l.schema + "' (" + std::to_string(total) +
                                  " tokens to encode; --kv-memory)");
          e->chunks[g].push_back(ch);
          for (int i = 0; i < n; ++i)
            for (int layer = 0; layer < L.n_layers; ++layer)
              for (int h = 0; h < L.n_kv_heads; ++h) {
                scratch.tree().read_kv(0, where[g].first + off + i, layer, h, k.data(), v.data());
                tree.write_kv_at(ch, i, layer, h, k.data(), v.data());
              }
          e->tokens += n;
          e->bytes += L.chunk_bytes();
        }
      }
    }
  } catch (...) {
    release_schema(tree, *e);
    throw;
  }
  e->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

void release_schema(PrefixTree& tree, const EncodedSchema& e) {
  for (const auto& seg : e.chunks)
    for (ChunkId c : seg) (void)tree.unpin(c);
}

Request prompt_request(const EncodedSchema& e, const Assembly& a, bool use_cache) {
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

}  // namespace cs::pml
