#include "pml/assemble.h"

#include <algorithm>
#include <map>
#include <set>

namespace cs::pml {

int Assembly::tokens() const {
  int n = 0;
  for (const Piece& p : pieces) n += int(p.tokens.size());
  return n;
}

std::vector<int32_t> Assembly::flat() const {
  std::vector<int32_t> out;
  for (const Piece& p : pieces) out.insert(out.end(), p.tokens.begin(), p.tokens.end());
  return out;
}

namespace {

class Assembler {
 public:
  Assembler(const Layout& l, const Encoder& enc) : l_(l), enc_(enc) {}

  // Marks module `m` (a child of `parent`) and what the import's children
  // pick as imported; records its parameter values.
  void import(int parent, const Import& im) {
    const int m = l_.child(parent, im.module);
    if (m < 0)
      throw PmlError(im.at, "unknown module '" + im.module + "' in " + l_.modules[size_t(parent)].path);
    const ModuleLayout& ml = l_.modules[size_t(m)];
    if (ml.union_id >= 0) {
      const auto [it, fresh] = union_pick_.emplace(ml.union_id, m);
      if (!fresh && it->second != m)
        throw PmlError(im.at, "'" + im.module + "' and '" + l_.modules[size_t(it->second)].name +
                                  "' are members of one union: import at most one");
    }
    if (!imported_.insert(m).second) throw PmlError(im.at, "module '" + im.module + "' is imported twice");
    std::set<std::string> params;
    for (int s : ml.segments)
      if (l_.segments[size_t(s)].kind == Segment::Kind::kParameter) params.insert(l_.segments[size_t(s)].param);
    for (const auto& [name, value] : im.args) {
      if (!params.count(name))
        throw PmlError(im.at, "module '" + im.module + "' has no parameter '" + name + "'");
      values_[{m, name}] = {value, im.at};
    }
    for (const Import& c : im.children) import(m, c);
  }

  // The imported modules' tokens, in position order.
  void collect(int m, Assembly& out) {
    out.modules.push_back(m);
    const ModuleLayout& ml = l_.modules[size_t(m)];
    std::vector<std::pair<int, int>> items;  // (start, segment or -(child + 1))
    for (int s : ml.segments) items.emplace_back(l_.segments[size_t(s)].start, s);
    for (int c : ml.children)
      if (imported_.count(c)) items.emplace_back(l_.modules[size_t(c)].start, -(c + 1));
    std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto [start, it] : items) {
      if (it < 0) {
        collect(-it - 1, out);
        continue;
      }
      const Segment& seg = l_.segments[size_t(it)];
      Piece p;
      p.start = seg.start;
      p.segment = it;
      if (seg.kind == Segment::Kind::kText) {
        p.kind = ml.cache ? Piece::Kind::kCached : Piece::Kind::kUncached;
        p.tokens = seg.tokens;
      } else {
        const auto v = values_.find({m, seg.param});
        if (v == values_.end()) continue;  // no value: its positions stay empty
        p.kind = Piece::Kind::kParameter;
        p.tokens = enc_(v->second.first, false);
        if (int(p.tokens.size()) > seg.length)
          throw PmlError(v->second.second, "the value of parameter '" + seg.param + "' has " +
                                               std::to_string(p.tokens.size()) + " tokens, more than its length " +
                                               std::to_string(seg.length));
      }
      if (!p.tokens.empty()) out.pieces.push_back(std::move(p));
    }
  }

 private:
  const Layout& l_;
  const Encoder& enc_;
  std::set<int> imported_;
  std::map<int, int> union_pick_;
  std::map<std::pair<int, std::string>, std::pair<std::string, Location>> values_;
};

}  // namespace

Assembly assemble(const Layout& l, const Prompt& prompt, const Encoder& enc, const RoleMarkers& roles,
                  const std::string& reply_start) {
  if (prompt.schema != l.schema)
    throw PmlError(prompt.at, "the prompt is for schema '" + prompt.schema + "', not '" + l.schema + "'");
  Assembler a(l, enc);
  for (const PromptItem& it : prompt.items)
    if (it.kind == PromptItem::Kind::kImport) a.import(0, it.import);
  Assembly out;
  a.collect(0, out);
  // New text after the schema, in order.
  int cursor = l.length;
  auto add_new = [&](const std::string& text, bool special) {
    if (text.empty()) return;
    std::vector<int32_t> toks = enc(text, special);
    if (toks.empty()) return;
    Piece p;
    p.kind = Piece::Kind::kNew;
    p.start = cursor;
    cursor += int(toks.size());
    p.tokens = std::move(toks);
    out.pieces.push_back(std::move(p));
  };
  for (const PromptItem& it : prompt.items) {
    if (it.kind == PromptItem::Kind::kText) add_new(it.text, false);
    if (it.kind != PromptItem::Kind::kRole) continue;
    const auto [open, close] = roles(it.role);
    add_new(open, true);
    for (const PromptItem& t : it.children) add_new(t.text, false);
    add_new(close, true);
  }
  add_new(reply_start, true);
  return out;
}

}  // namespace cs::pml
