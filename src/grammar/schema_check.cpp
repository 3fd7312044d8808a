#include "grammar/schema_check.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "grammar/grammar.h"
#include "grammar/limits.h"
#include "grammar/messages.h"

namespace cs {

namespace {

using json = nlohmann::json;

// Keywords that assert something of an instance (JSON Schema 2020-12's
// validation and applicator vocabularies, less those the engine never
// enforces, which Walk::enforced names first).
constexpr const char* kAssertions[] = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "maxProperties", "minProperties", "required",
    "properties", "patternProperties", "additionalProperties", "propertyNames", "items", "prefixItems",
    "unevaluatedItems", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "$ref"};

// A type's keywords: in a schema without "type" the engine compiles them as
// any JSON, unless properties or items make it an object or an array.
constexpr const char* kTypeKeywords[] = {
    "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minItems", "maxItems", "required", "minProperties", "maxProperties", "propertyNames", "patternProperties"};

// The formats the engine compiles as a regular expression (xgrammar 0.2.8's
// JSONFormatToRegexPattern), which then stands in for minLength/maxLength.
constexpr const char* kRegexFormats[] = {"date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6",
                                         "json-pointer", "relative-json-pointer", "time", "uri", "uri-reference",
                                         "uri-template", "uuid"};

// Whether a schema's "type" (a name or a list of names) has a name for which
// `pred` holds.
template <class Pred>
bool any_type(const json& t, Pred pred) {
  if (t.is_string()) return pred(t.get<std::string>());
  return std::any_of(t.begin(), t.end(), [&](const json& x) { return x.is_string() && pred(x.get<std::string>()); });
}

// Whether a JSON value is an instance of a type name (an integer: any number
// without a fraction, as JSON Schema counts 1.0).
bool of_type(const json& v, const std::string& t) {
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

class Walk {
 public:
  Walk(const json& root, SchemaUse use) : root_(root), use_(use) {}

  // `depth`: subschemas above this one (grammar/limits.h bounds it, and the
  // schemas in all, before the compiler, which recurses as this does).
  // `names`: the schema is a propertyNames', which the engine reads as a
  // string's without "type".
  void schema(const json& s, const std::string& at, int depth = 0, bool names = false) {
    if (depth > kMaxSchemaDepth)
      fail(at, "the schema nests subschemas more than " + std::to_string(kMaxSchemaDepth) + " levels deep; at most " +
                   std::to_string(kMaxSchemaDepth) + " are compiled");
    if (++nodes_ > kMaxSchemaNodes)
      fail(at, "the schema has more than " + std::to_string(kMaxSchemaNodes) + " subschemas; at most " +
                   std::to_string(kMaxSchemaNodes) + " are compiled");
    if (s.is_boolean()) return;
    if (!s.is_object()) fail(at, "a schema must be an object or a boolean, not " + std::string(s.type_name()));
    if (const json* t = get(s, "type")) type(*t, at + "/type");
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
    // This schema's own keywords, then its subschemas: `not` is named rather
    // than what is inside it.
    if (use_ == SchemaUse::kConstraint) enforced(s, at, names);
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
      if (const json* p = get(s, k)) schema(*p, at + "/" + k, depth + 1, std::string_view(k) == "propertyNames");
    for (const char* k : {"anyOf", "oneOf", "allOf", "prefixItems"})
      if (const json* p = get(s, k)) {
        if (!p->is_array() || p->empty()) fail(at + "/" + k, std::string(k) + " must be a non-empty list of schemas");
        for (size_t i = 0; i < p->size(); ++i) schema((*p)[i], at + "/" + k + "/" + std::to_string(i), depth + 1);
      }
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

  // What the engine would compile this object schema as, refused where that
  // is looser than the schema (schema_check.h). The engine compiles the first
  // of $ref, const, enum, anyOf, oneOf, allOf that the schema has and nothing
  // beside it; else the type(s) with their keywords; else an object for
  // properties, an array for items; else any JSON.
  void enforced(const json& s, const std::string& at, bool names) const {
    const auto drop = [&](const std::string& k, const std::string& why) {
      fail(at + "/" + k, why + " (the grammar engine cannot enforce it, so output could break the schema; "
                               "docs/serving.md lists what it enforces)");
    };
    for (const char* k : {"not", "if", "dependentRequired", "dependentSchemas", "dependencies", "contains",
                          "minContains", "maxContains", "$dynamicRef", "$recursiveRef"})
      if (s.contains(k)) drop(k, std::string(k) + " is not supported");
    if (const json* u = get(s, "uniqueItems"); u && *u == true)
      drop("uniqueItems", "uniqueItems (items that all differ) is not supported");
    std::string branch;
    for (const char* k : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"})
      if (s.contains(k)) {
        branch = k;
        break;
      }
    if (!branch.empty()) {
      if (branch == "allOf" && s["allOf"].size() > 1)
        drop("allOf", "an allOf of " + std::to_string(s["allOf"].size()) +
                          " schemas is compiled as any JSON; merge them into one schema");
      for (const char* k : kAssertions) {
        if (k == branch || !s.contains(k)) continue;
        if (std::string_view(k) == "type" && (branch == "enum" || branch == "const")) {
          if (const json* v = value_off_type(s, branch))
            drop("type", branch + "'s value " + v->dump() + " is not of type " + s["type"].dump() +
                             ", yet the engine compiles " + branch + " alone and would allow it; drop the value or the type");
          continue;
        }
        drop(k, std::string(k) + " beside " + branch + " is ignored (only " + branch +
                    " is compiled here); " +
                    (branch == "$ref"                       ? std::string("move it into the schema referred to")
                     : branch == "enum" || branch == "const" ? "keep only the values it allows"
                                                             : "move it into each of " + branch + "'s schemas"));
      }
      return;
    }
    // A required name that properties does not define is not required by
    // the engine (which writes only the properties it knows as required).
    const auto required_defined = [&] {
      if (const json* r = get(s, "required")) {
        const json* p = get(s, "properties");
        for (const json& n : *r)
          if (!p || !p->is_object() || !p->contains(n.get<std::string>()))
            drop("required", "required names " + n.dump() + ", which properties does not define; define it there");
      }
    };
    const json string_type = "string";
    const json* t = get(s, "type");
    if (!t && names) t = &string_type;  // a property name is a string
    if (t) {
      const auto is = [&](const char* name) { return any_type(*t, [&](const std::string& n) { return n == name; }); };
      if (const json* m = get(s, "multipleOf")) {
        if (is("number")) drop("multipleOf", "multipleOf of a number is not supported (of an integer it is)");
        if (is("integer") && !of_type(*m, "integer"))
          drop("multipleOf", "multipleOf " + m->dump() + " of an integer is not supported (a whole multiple is)");
      }
      if (is("object")) required_defined();
      const json* f = get(s, "format");
      const bool regex_format = f && f->is_string() && std::ranges::find(kRegexFormats, f->get<std::string>()) !=
                                                            std::end(kRegexFormats);
      if (is("string") && (s.contains("pattern") || regex_format))
        for (const char* k : {"minLength", "maxLength"})
          if (s.contains(k))
            drop(k, std::string(k) + " beside " + (s.contains("pattern") ? "pattern" : "format " + f->dump()) +
                        " is ignored (only the pattern is compiled); write the length into a pattern");
      return;
    }
    for (const char* k : {"properties", "additionalProperties", "unevaluatedProperties"})
      if (s.contains(k)) return required_defined();  // compiled as an object
    for (const char* k : {"items", "prefixItems", "unevaluatedItems"})
      if (s.contains(k)) return;
    for (const char* k : kTypeKeywords)
      if (s.contains(k))
        drop(k, std::string(k) + " in a schema without \"type\" is ignored (any JSON is compiled); add the type it "
                                 "is for");
  }

  // The first value of the enum (or the const) that is not of the schema's
  // type(s), or null.
  static const json* value_off_type(const json& s, const std::string& branch) {
    const auto fits = [&](const json& v) { return any_type(s["type"], [&](const std::string& n) { return of_type(v, n); }); };
    if (branch == "const") return fits(s["const"]) ? nullptr : &s["const"];
    for (const json& v : s["enum"])
      if (!fits(v)) return &v;
    return nullptr;
  }

  const json& root_;
  SchemaUse use_;
  int nodes_ = 0;
};

}  // namespace

void check_schema(const std::string& schema_text, SchemaUse use) {
  if (json_nesting(schema_text) > kMaxJsonNesting)
    throw GrammarError("the schema nests deeper than " + std::to_string(kMaxJsonNesting) + " levels of JSON; at most " +
                       std::to_string(kMaxSchemaDepth) + " levels of subschemas are compiled");
  const json root = json::parse(schema_text, nullptr, false);
  if (root.is_discarded()) throw GrammarError("the schema is not valid JSON");
  Walk(root, use).schema(root, "");
}

}  // namespace cs
