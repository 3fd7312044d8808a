// A schema written back as PML: self-contained (src= files are inlined as the
// text they were read as), so a saved schema re-parses to the same tree.
#include <pugixml.hpp>

#include <sstream>

#include "pml/pml.h"

namespace cs::pml {

namespace {

void write_children(const Node& n, pugi::xml_node out) {
  bool after_text = false;
  for (const Node& c : n.children) {
    // Adjacent text nodes stay apart (the parser would merge them and
    // normalise their spaces as one), so an empty comment separates them.
    if (c.kind == Node::Kind::kText && after_text) out.append_child(pugi::node_comment);
    after_text = c.kind == Node::Kind::kText;
    switch (c.kind) {
      case Node::Kind::kText:
        out.append_child(pugi::node_pcdata).set_value(c.text.c_str());
        break;
      case Node::Kind::kModule: {
        pugi::xml_node m = out.append_child("module");
        m.append_attribute("name") = c.name.c_str();
        if (!c.cache) m.append_attribute("cache") = "false";
        write_children(c, m);
        break;
      }
      case Node::Kind::kUnion: {
        pugi::xml_node u = out.append_child("union");
        if (!c.scaffold.empty()) u.append_attribute("scaffold") = c.scaffold.c_str();
        write_children(c, u);
        break;
      }
      case Node::Kind::kParameter: {
        pugi::xml_node p = out.append_child("parameter");
        p.append_attribute("name") = c.name.c_str();
        p.append_attribute("length") = c.length;
        if (!c.scaffold.empty()) p.append_attribute("scaffold") = c.scaffold.c_str();
        break;
      }
      case Node::Kind::kRole:
        write_children(c, out.append_child(c.name.c_str()));
        break;
    }
  }
}

}  // namespace

std::string to_pml(const Schema& s) {
  pugi::xml_document doc;
  pugi::xml_node root = doc.append_child("schema");
  root.append_attribute("name") = s.name.c_str();
  write_children(s.root, root);
  std::ostringstream out;
  doc.save(out, "", pugi::format_raw | pugi::format_no_declaration, pugi::encoding_utf8);
  return out.str();
}

}  // namespace cs::pml
