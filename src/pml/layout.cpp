#include "pml/layout.h"

#include <algorithm>
#include <sstream>

namespace cs::pml {

int Layout::child(int parent, const std::string& name) const {
  for (int c : modules[size_t(parent)].children)
    if (modules[size_t(c)].name == name) return c;
  return -1;
}

int Layout::tokens_of(int m) const {
  int n = 0;
  for (int s : modules[size_t(m)].segments) n += segments[size_t(s)].length;
  for (int c : modules[size_t(m)].children) n += tokens_of(c);
  return n;
}

namespace {

class LayoutBuilder {
 public:
  LayoutBuilder(const Encoder& enc, const RoleMarkers& roles) : enc_(enc), roles_(roles) {}

  Layout run(const Schema& s, std::vector<int32_t> start) {
    out_.schema = s.name;
    ModuleLayout root;
    root.name = s.name;
    root.path = s.name;
    root.node = &s.root;
    out_.modules.push_back(root);
    text(0, std::move(start));
    body(0, s.root);
    out_.modules[0].length = cursor_;
    out_.length = cursor_;
    return std::move(out_);
  }

 private:
  void text(int module, std::vector<int32_t> tokens) {
    if (tokens.empty()) return;
    Segment seg;
    seg.kind = Segment::Kind::kText;
    seg.length = int(tokens.size());
    seg.tokens = std::move(tokens);
    seg.start = cursor_;
    seg.module = module;
    cursor_ += seg.length;
    out_.modules[size_t(module)].segments.push_back(int(out_.segments.size()));
    out_.segments.push_back(std::move(seg));
  }

  void body(int module, const Node& n) {
    for (const Node& c : n.children) {
      switch (c.kind) {
        case Node::Kind::kText: text(module, encode(c.text, false)); break;
        case Node::Kind::kRole: {
          const auto [open, close] = roles_(c.name);
          text(module, encode(open, true));
          body(module, c);
          text(module, encode(close, true));
          break;
        }
        case Node::Kind::kParameter: parameter(module, c); break;
        case Node::Kind::kModule: sub_module(module, c, -1, true); break;
        case Node::Kind::kUnion: union_(module, c); break;
      }
    }
  }

  void parameter(int module, const Node& p) {
    Segment seg;
    seg.kind = Segment::Kind::kParameter;
    seg.param = p.name;
    seg.scaffold = p.scaffold;
    seg.start = cursor_;
    seg.length = p.length;
    seg.module = module;
    const int placeholder = int(encode(p.scaffold, false).size());
    if (placeholder > p.length)
      throw PmlError(p.at, "parameter '" + p.name + "' has a scaffold of " + std::to_string(placeholder) +
                               " tokens, more than its length " + std::to_string(p.length));
    cursor_ += p.length;
    out_.modules[size_t(module)].segments.push_back(int(out_.segments.size()));
    out_.segments.push_back(std::move(seg));
  }

  int sub_module(int parent, const Node& m, int union_id, bool in_scaffold) {
    const int id = int(out_.modules.size());
    ModuleLayout ml;
    ml.name = m.name;
    ml.path = out_.modules[size_t(parent)].path + "/" + m.name;
    ml.parent = parent;
    ml.union_id = union_id;
    ml.cache = m.cache && out_.modules[size_t(parent)].cache;
    ml.scaffold = in_scaffold && out_.modules[size_t(parent)].scaffold;
    ml.start = cursor_;
    ml.node = &m;
    out_.modules.push_back(ml);
    out_.modules[size_t(parent)].children.push_back(id);
    body(id, m);
    out_.modules[size_t(id)].length = cursor_ - out_.modules[size_t(id)].start;
    return id;
  }

  void union_(int parent, const Node& u) {
    const int id = out_.unions++;
    const int start = cursor_;
    int longest = 0;
    for (const Node& m : u.children) {
      cursor_ = start;
      sub_module(parent, m, id, m.name == u.scaffold);
      longest = std::max(longest, cursor_ - start);
    }
    cursor_ = start + longest;
  }

  std::vector<int32_t> encode(const std::string& t, bool special) const {
    return t.empty() ? std::vector<int32_t>() : enc_(t, special);
  }

  const Encoder& enc_;
  const RoleMarkers& roles_;
  Layout out_;
  int cursor_ = 0;
};

}  // namespace

Layout lay_out(const Schema& s, const Encoder& encode, const RoleMarkers& roles, std::vector<int32_t> start) {
  return LayoutBuilder(encode, roles).run(s, std::move(start));
}

std::string describe(const Layout& l) {
  std::ostringstream o;
  o << "schema " << l.schema << ": " << l.length << " positions, " << l.modules.size() << " modules, " << l.unions
    << " unions\n";
  o << "| module | start | end | tokens | cached | default scaffold |\n|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < l.modules.size(); ++i) {
    const ModuleLayout& m = l.modules[i];
    o << "| " << m.path << (m.union_id >= 0 ? " (union " + std::to_string(m.union_id) + ")" : "") << " | "
      << m.start << " | " << m.start + m.length << " | " << l.tokens_of(int(i)) << " | " << (m.cache ? "yes" : "no")
      << " | " << (m.scaffold ? "yes" : "no") << " |\n";
  }
  bool any = false;
  for (const Segment& s : l.segments) {
    if (s.kind != Segment::Kind::kParameter) continue;
    if (!any) o << "\n| parameter | module | start | length | scaffold |\n|---|---|---|---|---|\n";
    any = true;
    o << "| " << s.param << " | " << l.modules[size_t(s.module)].path << " | " << s.start << " | " << s.length
      << " | " << s.scaffold << " |\n";
  }
  return o.str();
}

}  // namespace cs::pml
