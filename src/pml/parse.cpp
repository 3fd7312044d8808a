#include <pugixml.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "base/parse_int.h"
#include "pml/pml.h"

namespace cs::pml {

std::string Location::str() const { return file + ":" + std::to_string(line) + ":" + std::to_string(column); }

std::string normalize_space(const std::string& text) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t b = 0, e = text.size();
  while (b < e && space(text[b])) ++b;
  while (e > b && space(text[e - 1])) --e;
  if (b == e) return text.empty() ? "" : " ";
  std::string out;
  out.reserve(e - b + 2);
  if (b > 0) out += ' ';
  out.append(text, b, e - b);
  if (e < text.size()) out += ' ';
  return out;
}

namespace {

// Line and column of a byte offset in the source.
class Source {
 public:
  Source(const std::string& text, std::string file) : file_(std::move(file)) {
    starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') starts_.push_back(i + 1);
  }
  Location at(ptrdiff_t offset) const {
    if (offset < 0) return {file_, 0, 0};
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), size_t(offset));
    const size_t line = size_t(it - starts_.begin());
    return {file_, int(line), int(size_t(offset) - starts_[line - 1] + 1)};
  }
  // An element's offset is its name's: point at its '<'.
  Location at(const pugi::xml_node& n) const {
    return at(n.offset_debug() - (n.type() == pugi::node_element ? 1 : 0));
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<size_t> starts_;
};

pugi::xml_document load(const std::string& xml, const Source& src) {
  pugi::xml_document doc;
  // Whitespace-only text is kept (a module of one space is a module), and
  // no entity other than XML's own is expanded.
  const pugi::xml_parse_result r =
      doc.load_buffer(xml.data(), xml.size(), pugi::parse_default | pugi::parse_ws_pcdata, pugi::encoding_utf8);
  if (!r) {
    std::string why = r.description();
    if (r.status == pugi::status_bad_start_element || r.status == pugi::status_bad_pcdata ||
        r.status == pugi::status_unrecognized_tag)
      why += " (a bare '<' in text must be written &lt;, or the text wrapped in <![CDATA[ ]]>)";
    throw PmlError(src.at(r.offset), "not well-formed XML: " + why);
  }
  return doc;
}

bool is_role(const std::string& tag) { return tag == "system" || tag == "user" || tag == "assistant"; }

// Nesting deeper than this is refused (the parsers recurse).
constexpr int kMaxDepth = 64;

// Refuses elements nested more than kMaxDepth deep.
void check_depth(const pugi::xml_node& n, const Source& src) {
  int depth = 0;
  for (pugi::xml_node p = n; p; p = p.parent()) ++depth;
  if (depth > kMaxDepth) throw PmlError(src.at(n), "elements nested more than " + std::to_string(kMaxDepth) + " deep");
}

// XML-name syntax: a letter or '_' first, then letters, digits, '.', '-', '_'.
bool is_xml_name(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || (c & 0x80);
  });
}

std::string read_file(const std::string& path, const Location& at) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw PmlError(at, "cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

class SchemaParser {
 public:
  SchemaParser(const Source& src, const SrcFiles& files) : src_(src), files_(files) {}

  Schema parse(const pugi::xml_document& doc) {
    const pugi::xml_node root = doc.document_element();
    if (std::string(root.name()) != "schema")
      throw PmlError(src_.at(root), "the root element is <" + std::string(root.name()) + ">, expected <schema>");
    Schema s;
    s.name = required(root, "name");
    s.root.kind = Node::Kind::kModule;
    s.root.name = s.name;
    s.root.at = src_.at(root);
    children(root, s.root, /*top=*/true);
    return s;
  }

 private:
  std::string required(const pugi::xml_node& n, const char* attr) {
    const pugi::xml_attribute a = n.attribute(attr);
    if (!a) throw PmlError(src_.at(n), "<" + std::string(n.name()) + "> needs a '" + attr + "' attribute");
    return a.value();
  }

  void no_other_attributes(const pugi::xml_node& n, std::initializer_list<const char*> allowed) {
    for (const pugi::xml_attribute a : n.attributes())
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* x) { return std::string(x) == a.name(); }))
        throw PmlError(src_.at(n), "<" + std::string(n.name()) + "> has an unknown attribute '" + a.name() + "'");
  }

  void add_text(Node& parent, const std::string& raw, const Location& at) {
    const std::string t = normalize_space(raw);
    if (t.empty()) return;
    Node n;
    n.kind = Node::Kind::kText;
    n.text = t;
    n.at = at;
    parent.children.push_back(std::move(n));
  }

  // The children of a module (or role block, or the schema) into `out`.
  void children(const pugi::xml_node& x, Node& out, bool top) {
    check_depth(x, src_);
    std::set<std::string> names;  // module names, unique among siblings
    for (const pugi::xml_node c : x.children()) {
      if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) {
        add_text(out, c.value(), src_.at(c));
        continue;
      }
      if (c.type() != pugi::node_element) continue;  // comments, processing instructions
      const std::string tag = c.name();
      if (tag == "module") {
        Node m = module(c);
        if (!names.insert(m.name).second)
          throw PmlError(src_.at(c), "duplicate module name '" + m.name + "' (names must be unique among siblings)");
        out.children.push_back(std::move(m));
      } else if (tag == "union") {
        Node u = union_(c);
        for (const Node& m : u.children)
          if (!names.insert(m.name).second)
            throw PmlError(src_.at(c), "duplicate module name '" + m.name + "' (names must be unique among siblings)");
        out.children.push_back(std::move(u));
      } else if (tag == "parameter") {
        if (top) throw PmlError(src_.at(c), "<parameter> must be inside a <module>, not directly under <schema>");
        out.children.push_back(parameter(c));
      } else if (is_role(tag)) {
        if (out.kind == Node::Kind::kRole)
          throw PmlError(src_.at(c), "<" + tag + "> inside <" + out.name + ">: role blocks do not nest");
        no_other_attributes(c, {});
        Node r;
        r.kind = Node::Kind::kRole;
        r.name = tag;
        r.at = src_.at(c);
        children(c, r, top);
        out.children.push_back(std::move(r));
      } else if (tag == "schema" || tag == "prompt") {
        throw PmlError(src_.at(c), "<" + tag + "> cannot be nested");
      } else {
        // Any other tag is literal text: its XML serialisation.
        std::ostringstream s;
        c.print(s, "", pugi::format_raw);
        add_text(out, s.str(), src_.at(c));
      }
    }
  }

  Node module(const pugi::xml_node& c) {
    no_other_attributes(c, {"name", "cache", "src"});
    Node m;
    m.kind = Node::Kind::kModule;
    m.name = required(c, "name");
    m.at = src_.at(c);
    if (!is_xml_name(m.name)) throw PmlError(m.at, "module name '" + m.name + "' is not an XML name");
    if (const pugi::xml_attribute a = c.attribute("cache")) {
      const std::string v = a.value();
      if (v != "true" && v != "false") throw PmlError(m.at, "cache=\"" + v + "\": expected \"true\" or \"false\"");
      m.cache = v == "true";
    }
    if (const pugi::xml_attribute a = c.attribute("src")) {
      add_text(m, files_.read(a.value(), m.at), m.at);
    }
    children(c, m, false);
    return m;
  }

  Node union_(const pugi::xml_node& c) {
    no_other_attributes(c, {"scaffold"});
    Node u;
    u.kind = Node::Kind::kUnion;
    u.at = src_.at(c);
    u.scaffold = c.attribute("scaffold").value();
    for (const pugi::xml_node m : c.children()) {
      if (m.type() == pugi::node_pcdata || m.type() == pugi::node_cdata) {
        if (normalize_space(m.value()) != " " && !normalize_space(m.value()).empty())
          throw PmlError(src_.at(m), "text directly inside <union>: only <module> members are allowed");
        continue;
      }
      if (m.type() != pugi::node_element) continue;
      if (std::string(m.name()) != "module")
        throw PmlError(src_.at(m), "<" + std::string(m.name()) + "> inside <union>: only <module> members are allowed");
      u.children.push_back(module(m));
    }
    if (u.children.empty()) throw PmlError(u.at, "<union> has no <module> member");
    if (!u.scaffold.empty() &&
        std::none_of(u.children.begin(), u.children.end(), [&](const Node& m) { return m.name == u.scaffold; }))
      throw PmlError(u.at, "union scaffold '" + u.scaffold + "' is not one of its members");
    return u;
  }

  Node parameter(const pugi::xml_node& c) {
    no_other_attributes(c, {"name", "length", "scaffold"});
    Node p;
    p.kind = Node::Kind::kParameter;
    p.at = src_.at(c);
    p.name = required(c, "name");
    const std::string len = required(c, "length");
    const long v = parse_long(len).value_or(0);
    if (v < 1 || v > 4096)
      throw PmlError(p.at, "parameter '" + p.name + "' has length \"" + len + "\": expected an integer in [1, 4096]");
    p.length = int(v);
    p.scaffold = c.attribute("scaffold").value();
    if (c.first_child()) throw PmlError(p.at, "<parameter> '" + p.name + "' must be empty");
    return p;
  }

  const Source& src_;
  const SrcFiles& files_;
};

class PromptParser {
 public:
  explicit PromptParser(const Source& src) : src_(src) {}

  Prompt parse(const pugi::xml_document& doc) {
    const pugi::xml_node root = doc.document_element();
    if (std::string(root.name()) != "prompt")
      throw PmlError(src_.at(root), "the root element is <" + std::string(root.name()) + ">, expected <prompt>");
    Prompt p;
    p.at = src_.at(root);
    const pugi::xml_attribute s = root.attribute("schema");
    if (!s) throw PmlError(p.at, "<prompt> needs a 'schema' attribute");
    p.schema = s.value();
    for (const pugi::xml_node c : root.children()) {
      if (c.type() == pugi::node_pcdata || c.type() == pugi::node_cdata) {
        text(p.items, c);
        continue;
      }
      if (c.type() != pugi::node_element) continue;
      const std::string tag = c.name();
      if (is_role(tag)) {
        PromptItem r;
        r.kind = PromptItem::Kind::kRole;
        r.role = tag;
        r.at = src_.at(c);
        for (const pugi::xml_node t : c.children()) {
          if (t.type() == pugi::node_pcdata || t.type() == pugi::node_cdata) text(r.children, t);
          else if (t.type() == pugi::node_element)
            throw PmlError(src_.at(t), "<" + std::string(t.name()) + "> inside <" + tag +
                                           "> of a prompt: role blocks of a prompt hold new text only");
        }
        p.items.push_back(std::move(r));
      } else {
        PromptItem i;
        i.kind = PromptItem::Kind::kImport;
        i.import = import(c);
        i.at = i.import.at;
        p.items.push_back(std::move(i));
      }
    }
    return p;
  }

 private:
  void text(std::vector<PromptItem>& out, const pugi::xml_node& c) {
    const std::string t = normalize_space(c.value());
    if (t.empty() || t == " ") return;  // whitespace between imports is layout, not text
    PromptItem i;
    i.kind = PromptItem::Kind::kText;
    i.text = t;
    i.at = src_.at(c);
    out.push_back(std::move(i));
  }

  Import import(const pugi::xml_node& c) {
    check_depth(c, src_);
    Import im;
    im.module = c.name();
    im.at = src_.at(c);
    for (const pugi::xml_attribute a : c.attributes()) im.args[a.name()] = a.value();
    for (const pugi::xml_node k : c.children()) {
      if (k.type() == pugi::node_element) {
        im.children.push_back(import(k));
      } else if ((k.type() == pugi::node_pcdata || k.type() == pugi::node_cdata) &&
                 normalize_space(k.value()) != " " && !normalize_space(k.value()).empty()) {
        throw PmlError(src_.at(k), "text inside the import of '" + im.module +
                                       "': a module reference has no text of its own (use a parameter)");
      }
    }
    return im;
  }

  const Source& src_;
};

}  // namespace

Schema parse_schema(const std::string& xml, const std::string& file, const SrcFiles& files) {
  const Source src(xml, file);
  return SchemaParser(src, files).parse(load(xml, src));
}

Schema parse_schema_file(const std::string& path) {
  const std::string xml = read_file(path, {path, 0, 0});
  const size_t slash = path.rfind('/');
  return parse_schema(xml, path, SrcFiles::relative_to(slash == std::string::npos ? "." : path.substr(0, slash)));
}

Prompt parse_prompt(const std::string& xml, const std::string& file) {
  const Source src(xml, file);
  return PromptParser(src).parse(load(xml, src));
}

}  // namespace cs::pml
