#include "pml/encode.h"

#include <atomic>
#include <chrono>
#include <map>

#include "cache/prefix_kv.h"
#include "model/chat_template.h"

namespace cs::pml {

TextModel text_model(const LlamaModel& model) {
  const Tokenizer& tok = model.tokenizer();
  const ChatTemplate& chat = model.chat();
  TextModel tm;
  tm.encode = [&tok](const std::string& t, bool special) { return tok.encode(t, special, false); };
  tm.roles = [&chat](const std::string& r) {
    const RoleText t = chat.role_markers(r);
    return std::make_pair(t.open, t.close);
  };
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

SchemaEncoding::SchemaEncoding(Schema s, const TextModel& tm, const KvLayout& layout, int n_heads)
    : e_(std::make_unique<EncodedSchema>()), tm_(tm), layout_(layout), n_heads_(n_heads),
      t0_(std::chrono::steady_clock::now()) {
  e_->schema = std::move(s);
  e_->layout = lay_out(e_->schema, tm.encode, tm.roles, tm.bos);
  name_ = e_->layout.schema;
  const Layout& l = e_->layout;
  e_->chunks.resize(l.segments.size());
  // One scaffold for the default and one per module that is not in it.
  owners_ = {0};
  for (int m = 1; m < int(l.modules.size()); ++m)
    if (!l.modules[size_t(m)].scaffold) owners_.push_back(m);
  e_->scaffolds = int(owners_.size());
  for (int o : owners_) {
    included_.push_back(scaffold_modules(l, o));
    for (const Segment& seg : l.segments)
      if (included_.back()[size_t(seg.module)]) total_ += seg.length;
  }
  start_scaffold();
}

SchemaEncoding::~SchemaEncoding() = default;

// Lays out the current scaffold's tokens (skipping empty ones) in a fresh
// private store.
void SchemaEncoding::start_scaffold() {
  const Layout& l = e_->layout;
  for (; scaffold_ < owners_.size(); ++scaffold_) {
    // Segments are in document order, which is position order within a scaffold.
    toks_.clear();
    pos_.clear();
    where_.assign(l.segments.size(), {-1, 0});
    for (size_t g = 0; g < l.segments.size(); ++g) {
      const Segment& seg = l.segments[g];
      if (!included_[scaffold_][size_t(seg.module)]) continue;
      std::vector<int32_t> t = seg.tokens;
      if (seg.kind == Segment::Kind::kParameter) {
        t = seg.scaffold.empty() ? std::vector<int32_t>() : tm_.encode(seg.scaffold, false);
        t.resize(size_t(seg.length), tm_.pad);
      }
      where_[g] = {int(toks_.size()), int(t.size())};
      for (size_t i = 0; i < t.size(); ++i) {
        toks_.push_back(t[i]);
        pos_.push_back(seg.start + int32_t(i));
      }
    }
    if (toks_.empty()) continue;
    next_ = 0;
    scratch_.reset();  // made by the first slice, on the thread that runs them (the tree's writer)
    return;
  }
  scratch_.reset();
}

int SchemaEncoding::add_slice(Batch& batch, int max) {
  if (!scratch_) {
    const size_t chunks = toks_.size() / size_t(layout_.chunk_size) + 2;
    scratch_ = std::make_unique<PrefixKv>(layout_, layout_.chunk_bytes() * chunks, n_heads_, AttnPath::kPerSequence,
                                          false);
    int matched = 0;
    (void)scratch_->join(0, {}, &matched);
  }
  const size_t n = std::min(toks_.size() - next_, size_t(std::max(max, 0)));
  for (size_t i = next_; i < next_ + n; ++i) batch.add(toks_[i], pos_[i], 0, false);
  pending_ = n;
  return int(n);
}

KvStore& SchemaEncoding::scratch() { return *scratch_; }

void SchemaEncoding::ran(PrefixKv& kv) {
  next_ += pending_;
  done_ += int(pending_);
  pending_ = 0;
  if (next_ < toks_.size()) return;
  pin_scaffold(kv);
  ++scaffold_;
  start_scaffold();
}

// Stores the segments the current scaffold owns: cached text of its modules,
// each in fresh chunks.
void SchemaEncoding::pin_scaffold(PrefixKv& kv) {
  const Layout& l = e_->layout;
  const int cs = layout_.chunk_size;
  const size_t d = size_t(layout_.head_dim), w = size_t(layout_.n_kv_heads) * d;
  std::vector<float> k(size_t(cs) * w), v(size_t(cs) * w);
  std::vector<int32_t> slots(static_cast<size_t>(cs));
  for (size_t g = 0; g < l.segments.size(); ++g) {
    const Segment& seg = l.segments[g];
    const ModuleLayout& ml = l.modules[size_t(seg.module)];
    if (where_[g].first < 0 || seg.kind != Segment::Kind::kText || !ml.cache) continue;
    if (owner_of(l, seg.module) != owners_[scaffold_]) continue;
    const uint64_t group = new_pin_group();
    for (int off = 0; off < where_[g].second; off += cs) {
      const int n = std::min(cs, where_[g].second - off);
      const ChunkId ch = kv.pin(std::span(seg.tokens).subspan(size_t(off), size_t(n)), group);
      if (ch < 0)
        throw Error("the KV pool has no room for schema '" + l.schema + "' (" + std::to_string(total_) +
                        " tokens to encode; --kv-memory)",
                    ErrorKind::kNoRoom);
      e_->chunks[g].push_back(ch);
      // Read back as floats and written converted (exact for every KV type),
      // a chunk's rows of a layer in one call (one copy to a GPU's memory).
      for (int layer = 0; layer < layout_.n_layers; ++layer) {
        for (int i = 0; i < n; ++i) {
          slots[size_t(i)] = ch * cs + i;
          for (int h = 0; h < layout_.n_kv_heads; ++h)
            scratch_->read_kv(0, where_[g].first + off + i, layer, h, k.data() + size_t(i) * w + size_t(h) * d,
                              v.data() + size_t(i) * w + size_t(h) * d);
        }
        kv.memory().write_host_rows(layer, slots.data(), n, k.data(), v.data());
      }
      e_->tokens += n;
      e_->bytes += layout_.chunk_bytes();
    }
  }
}

void SchemaEncoding::abandon(PrefixKv& kv) {
  release_schema(kv, *e_);
  for (auto& c : e_->chunks) c.clear();
}

std::unique_ptr<EncodedSchema> SchemaEncoding::take() {
  e_->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  return std::move(e_);
}

std::unique_ptr<EncodedSchema> encode_schema(Schema s, const LlamaModel& model, PrefixKv& kv, const TextModel& tm,
                                             const std::function<void(int, int)>& progress) {
  const LlamaConfig& c = model.config();
  SchemaEncoding enc(std::move(s), tm, kv.layout(), c.n_heads);
  Workspace ws;
  std::vector<float> logits;
  try {
    while (!enc.finished()) {
      Batch batch;
      enc.add_slice(batch, 512);
      model.forward(batch, enc.scratch(), ws, logits);
      enc.ran(kv);
      if (progress) progress(enc.done(), enc.total());
    }
  } catch (...) {
    enc.abandon(kv);
    throw;
  }
  return enc.take();
}

void release_schema(PrefixKv& kv, const EncodedSchema& e) {
  for (const auto& seg : e.chunks)
    for (ChunkId c : seg) (void)kv.unpin(c);
}

}  // namespace cs::pml
