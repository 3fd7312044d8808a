#include "grammar/schema_check.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "grammar/grammar.h"
#include "grammar/limits.h"
#include "grammar/messages.h"

namespace cs {

namespace {

using json = nlohmann::json;

class Walk {
 public:
  explicit Walk(const json& root) : root_(root) {}

  // `depth`: subschemas above this one (grammar/limits.h bounds it, and the
  // schemas in all, before the compiler, which recurses as this does).
  void schema(const json& s, const std::string& at, int depth = 0) {
    if (depth > kMaxSchemaDepth)
      fail(at, "the schema nests subschemas more than " + std::to_string(kMaxSchemaDepth) + " levels deep; at most " +
                   std::to_string(kMaxSchemaDepth) + " are compiled");
    if (++nodes_ > kMaxSchemaNodes)
      fail(at, "the schema has more than " + std::to_string(kMaxSchemaNodes) + " subschemas; at most " +
                   std::to_string(kMaxSchemaNodes) + " are compiled");
    if (s.is_boolean()) return;
    if (!s.is_object()) fail(at, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    if (const json* t = get(s, "type")) type(*t, at + "/type");
    for (const char* k : {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
      if (const json* p = get(s, k)) {
        if (!p->is_object()) fail(at + "/" + k, std::string(k) + " must be an object of schemas");
        if (int(p->size()) > kMaxProperties)
          fail(at + "/" + k, std::string(k) + " has " + std::to_string(p->size()) + " entries; at most " +
                                 std::to_string(kMaxProperties) + " are compiled");
        for (const auto& [name, sub] : p->items()) schema(sub, at + "/" + k + "/" + pointer_escape(name), depth + 1);
      }
    for (const char* k : {"additionalProperties", "items", "not", "contains", "propertyNames", "unevaluatedProperties",
                          "unevaluatedItems", "if", "then", "else"})
      if (const json* p = get(s, k)) schema(*p, at + "/" + k, depth + 1);
    for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems"})
      if (const json* p = get(s, k)) {
        if (!p->is_array() || p->empty()) fail(at + "/" + k, std::string(k) + " must be a non-empty list of schemas");
        for (size_t i = 0; i < p->size(); ++i) schema((*p)[i], at + "/" + k + "/" + std::to_string(i), depth + 1);
      }
    if (const json* r = get(s, "required")) {
      if (!r->is_array()) fail(at + "/required", "required must be a list of property names");
      for (const json& n : *r)
        if (!n.is_string()) fail(at + "/required", "required must be a list of property names, not " + n.dump());
    }
    if (const json* e = get(s, "enum"); e && (!e->is_array() || e->empty()))
      fail(at + "/enum", "enum must be a non-empty list");
    if (const json* e = get(s, "enum"); e && int(e->size()) > kMaxEnumValues)
      fail(at + "/enum", "enum has " + std::to_string(e->size()) + " values; at most " +
                             std::to_string(kMaxEnumValues) + " are compiled");
    counts(s, at, "minItems", "maxItems");
    counts(s, at, "minLength", "maxLength");
    counts(s, at, "minProperties", "maxProperties");
    bounds(s, at, "minimum", "maximum");
    bounds(s, at, "exclusiveMinimum", "exclusiveMaximum");
    if (const json* p = get(s, "pattern")) pattern(*p, at + "/pattern");
    if (const json* r = get(s, "$ref")) ref(*r, at + "/$ref");
  }

 private:
  [[noreturn]] static void fail(const std::string& at, const std::string& why) {
    throw GrammarError("at " + (at.empty() ? std::string("/") : at) + ": " + why);
  }

  static const json* get(const json& s, const char* k) {
    auto it = s.find(k);
    return it == s.end() ? nullptr : &*it;
  }

  static std::string pointer_escape(const std::string& k) {
    std::string out;
    for (char c : k) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }

  static void type(const json& t, const std::string& at) {
    static const char* kTypes[] = {"string", "number", "integer", "boolean", "object", "array", "null"};
    auto known = [](const json& x) {
      if (!x.is_string()) return false;
      for (const char* k : kTypes)
        if (x == k) return true;
      return false;
    };
    const bool ok = t.is_array() ? !t.empty() && std::all_of(t.begin(), t.end(), known) : known(t);
    if (!ok)
      fail(at, "type " + t.dump() + " is not a JSON type (string, number, integer, boolean, object, array, null)");
  }

  static void counts(const json& s, const std::string& at, const char* lo, const char* hi) {
    long long v[2] = {0, -1};
    for (int i = 0; i < 2; ++i) {
      const char* k = i == 0 ? lo : hi;
      const json* x = get(s, k);
      if (!x) continue;
      if (!x->is_number_integer() || x->get<long long>() < 0)
        fail(at + "/" + k, std::string(k) + " must be a non-negative integer, not " + x->dump());
      v[i] = x->get<long long>();
    }
    if (v[1] >= 0 && v[0] > v[1])
      fail(at, std::string(lo) + " " + std::to_string(v[0]) + " is above " + hi + " " + std::to_string(v[1]));
  }

  static void bounds(const json& s, const std::string& at, const char* lo, const char* hi) {
    const json* a = get(s, lo);
    const json* b = get(s, hi);
    for (const auto& [x, k] : {std::pair{a, lo}, std::pair{b, hi}})
      if (x && !x->is_number()) fail(at + "/" + k, std::string(k) + " must be a number, not " + x->dump());
    if (a && b && a->get<double>() > b->get<double>())
      fail(at, std::string(lo) + " " + a->dump() + " is above " + hi + " " + b->dump());
  }

  static void pattern(const json& p, const std::string& at) {
    if (!p.is_string()) fail(at, "pattern must be a string");
    try {
      check_regex_limits(p.get<std::string>(), "pattern");
    } catch (const GrammarError& e) {
      fail(at, e.what());
    }
    try {
      (void)xgrammar::Grammar::FromRegex(p.get<std::string>());
    } catch (const std::exception& e) {
      fail(at, "pattern " + p.dump() + " is not a regular expression: " + client_message(e.what()));
    }
  }

  void ref(const json& r, const std::string& at) const {
    if (!r.is_string()) fail(at, "$ref must be a string");
    const std::string s = r.get<std::string>();
    if (s.empty() || s[0] != '#') fail(at, "$ref \"" + s + "\" is not inside this schema (only #/... references are read)");
    try {
      const json::json_pointer p(s.substr(1));
      if (!root_.contains(p)) fail(at, "$ref \"" + s + "\" leads nowhere in this schema");
    } catch (const json::exception&) {
      fail(at, "$ref \"" + s + "\" is not a JSON pointer");
    }
  }

  const json& root_;
  int nodes_ = 0;
};

}  // namespace

void check_schema(const std::string& schema_text) {
  if (json_nesting(schema_text) > kMaxJsonNesting)
    throw GrammarError("the schema nests deeper than " + std::to_string(kMaxJsonNesting) + " levels of JSON; at most " +
                       std::to_string(kMaxSchemaDepth) + " levels of subschemas are compiled");
  const json root = json::parse(schema_text, nullptr, false);
  if (root.is_discarded()) throw GrammarError("the schema is not valid JSON");
  Walk(root).schema(root, "");
}

}  // namespace cs
