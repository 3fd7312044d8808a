// jinja2's built-in filters and tests, as chat templates use them (autoescape
// off, HF's tojson).
#include <algorithm>
#include <cmath>
#include <map>

#include "base/utf8.h"
#include "jinja/builtins.h"
#include "jinja/error.h"

namespace cs::jinja {

namespace {

using FilterFn = Value (*)(const Env&, const Value&, Args&);

}  // namespace

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      List out;
      for (const auto& kv : v.dict().items) out.push_back(v.dict().key(kv.first));
      return out;
    }
    case Value::Kind::kString: {
      List out;
      const std::string& t = v.text();
      for (size_t i = 0; i < t.size(); i += utf8_len(t, i)) out.push_back(Value(v.as_str().slice(i, i + utf8_len(t, i))));
      return out;
    }
    default: type_error("'" + v.type_name() + "' object is not iterable");
  }
}

namespace {

// obj.a.b for an attribute path ("a.b"; digits index lists).
Value path_of(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t b = 0;
  for (;;) {
    const size_t e = path.find('.', b);
    const std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c); }))
      cur = get_item(cur, Value(int_of_digits(part)));
    else
      cur = get_item(cur, Value(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

Value lowered(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  std::string t = v.text();
  for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  return Value(t);
}

Args rest(const Args& a, size_t from) {
  Args r;
  if (a.pos.size() > from) r.pos.assign(a.pos.begin() + long(from), a.pos.end());
  r.kw = a.kw;
  return r;
}

Value f_tojson(const Env&, const Value& v, Args& a) {
  const Value indent = a.get(0, "indent"), seps = a.get(2, "separators"), sort = a.get(3, "sort_keys");
  int ind = -1;
  if (indent.kind() == Value::Kind::kInt) ind = int(std::clamp<int64_t>(indent.as_int(), 0, 64));
  std::string item_sep = ind < 0 ? ", " : ",", key_sep = ": ";
  if (seps.is_list() && seps.list().size() == 2 && seps.list()[0].is_string() && seps.list()[1].is_string()) {
    item_sep = seps.list()[0].text();
    key_sep = seps.list()[1].text();
  }
  return Value(Str(v.to_json(ind, item_sep, key_sep, sort.truthy()), v.has_content()));
}

Value f_length(const Env&, const Value& v, Args&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value(int64_t(0));
    case Value::Kind::kString: return Value(int64_t(utf8_length(v.text())));
    case Value::Kind::kList: return Value(int64_t(v.list().size()));
    case Value::Kind::kDict: return Value(int64_t(v.dict().items.size()));
    default: type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_default(const Env&, const Value& v, Args& a) {
  const bool boolean = a.get(1, "boolean").truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value d = a.get(0, "default_value");
    return d.is_undefined() ? Value("") : d;
  }
  return v;
}

Value f_trim(const Env&, const Value& v, Args& a) { return Value(py_strip(v.to_str(), a.get(0, "chars"), true, true)); }
Value f_string(const Env&, const Value& v, Args&) { return Value(v.to_str()); }
Value f_safe(const Env&, const Value& v, Args&) {
  Str s = v.to_str();
  return Value(s.mark_safe());
}

Value f_join(const Env&, const Value& v, Args& a) {
  const Value sep = a.get(0, "d"), attr = a.get(1, "attribute");
  Str out;
  bool first = true;
  for (const Value& e : iterate(v)) {
    if (!first) out.append(sep.is_undefined() ? Str() : sep.to_str());
    first = false;
    out.append((attr.is_undefined() ? e : path_of(e, attr.to_str().text())).to_str());
  }
  return Value(out);
}

Value f_upper(const Env&, const Value& v, Args&) { return Value(map_ascii(v.to_str(), [](int c) { return std::toupper(c); })); }
Value f_lower(const Env&, const Value& v, Args&) { return Value(map_ascii(v.to_str(), [](int c) { return std::tolower(c); })); }

Value f_capitalize(const Env&, const Value& v, Args&) { return Value(py_capitalize(v.to_str())); }

Value f_title(const Env&, const Value& v, Args&) {
  // jinja2: words begin after whitespace or - ( { [ <; first letter upper, rest lower.
  Str out;
  bool start = true;
  const Str src = v.to_str();
  for (const auto& [piece, content] : src.pieces()) {
    std::string t(piece);
    for (char& c : t) {
      const unsigned char u = static_cast<unsigned char>(c);
      const bool boundary = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (u < 0x80) c = char(boundary ? c : start ? std::toupper(u) : std::tolower(u));
      start = boundary;
    }
    out.append(Str(std::move(t), content));
  }
  return Value(out);
}

Value f_items(const Env&, const Value& v, Args&) {
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  return Value(dict_items(v.dict()));
}

Value f_dictsort(const Env&, const Value& v, Args& a) {
  if (!v.is_dict()) type_error("dictsort expects a mapping");
  const bool cs = a.get(0, "case_sensitive").truthy();
  const Value by = a.get(1, "by");
  const bool by_value = by.is_string() && by.text() == "value";
  const bool reverse = a.get(2, "reverse").truthy();
  List out = dict_items(v.dict());
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    const size_t i = by_value ? 1 : 0;
    const int c = compare(lowered(x.list()[i], cs), lowered(y.list()[i], cs));
    return reverse ? c > 0 : c < 0;
  });
  return Value(std::move(out));
}

Value f_list(const Env&, const Value& v, Args&) { return Value(iterate(v)); }

Value f_replace(const Env&, const Value& v, Args& a) {
  const Value old = a.get(0, "old"), with = a.get(1, "new"), count = a.get(2, "count");
  const int64_t n = count.kind() == Value::Kind::kInt ? count.as_int() : -1;
  return Value(py_replace(v.to_str(), old.to_str().text(), with.to_str(), n));
}

Value f_indent(const Env&, const Value& v, Args& a) {
  const Value w = a.get(0, "width");
  const std::string ind = w.is_string() ? w.text() : std::string(size_t(w.kind() == Value::Kind::kInt ? std::clamp<int64_t>(w.as_int(), 0, 1024) : 4), ' ');
  const bool first = a.get(1, "first").truthy(), blank = a.get(2, "blank").truthy();
  Str s = v.to_str();
  s.append_markup("\n");
  const std::vector<Str> lines = py_splitlines(s);
  Str out;
  if (first) out.append_markup(ind);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) {
      out.append_markup("\n");
      if (blank || !lines[i].text().empty()) out.append_markup(ind);
    }
    out.append(lines[i]);
  }
  return Value(out);
}

// select / reject / selectattr / rejectattr.
Value filter_seq(const Env& env, const Value& v, Args& a, bool attr, bool keep) {
  List out;
  const size_t test_at = attr ? 1 : 0;
  const Value test = a.get(test_at, "");
  Args targs = rest(a, test_at + 1);
  const std::string path = attr ? (a.get(0, "attribute")).to_str().text() : "";
  if (!v.truthy()) return Value(std::move(out));  // jinja2 skips a falsy sequence (None) whole
  for (const Value& e : iterate(v)) {
    const Value x = attr ? path_of(e, path) : e;
    const bool ok = test.is_undefined() ? x.truthy() : env.test(test.to_str().text(), x, targs);
    if (ok == keep) out.push_back(e);
  }
  return Value(std::move(out));
}
Value f_select(const Env& e, const Value& v, Args& a) { return filter_seq(e, v, a, false, true); }
Value f_reject(const Env& e, const Value& v, Args& a) { return filter_seq(e, v, a, false, false); }
Value f_selectattr(const Env& e, const Value& v, Args& a) { return filter_seq(e, v, a, true, true); }
Value f_rejectattr(const Env& e, const Value& v, Args& a) { return filter_seq(e, v, a, true, false); }

Value f_map(const Env& env, const Value& v, Args& a) {
  List out;
  if (!v.truthy()) return Value(std::move(out));  // as jinja2: a falsy sequence (None) maps to nothing
  const Value attr = a.get(SIZE_MAX, "attribute");
  if (!attr.is_undefined()) {
    const Value def = a.get(SIZE_MAX, "default");
    for (const Value& e : iterate(v)) {
      Value x = path_of(e, attr.to_str().text());
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return Value(std::move(out));
  }
  if (a.pos.empty()) type_error("map requires a filter name or attribute=");
  const std::string name = (a.pos[0]).to_str().text();
  Args fargs = rest(a, 1);
  for (const Value& e : iterate(v)) out.push_back(env.filter(name, e, fargs));
  return Value(std::move(out));
}

Value f_int(const Env&, const Value& v, Args& a) {
  const Value def = a.get(0, "default");
  const Value fallback = def.is_undefined() ? Value(int64_t(0)) : def;
  switch (v.kind()) {
    case Value::Kind::kInt: return v;
    case Value::Kind::kBool: return Value(int64_t(v.as_bool()));
    case Value::Kind::kFloat: return std::isfinite(v.as_number()) ? Value(int_of(v.as_number())) : fallback;
    case Value::Kind::kString: {
      const std::string t = py_strip(v.as_str(), Value(), true, true).text();
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && *end == 0 && errno == 0) return Value(int64_t(i));
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && *end == 0 && std::isfinite(d)) return Value(int_of(d));
      return fallback;
    }
    default: return fallback;
  }
}

Value f_float(const Env&, const Value& v, Args& a) {
  const Value def = a.get(0, "default");
  if (v.is_number() || v.kind() == Value::Kind::kBool) return Value(v.as_number());
  if (v.is_string()) {
    char* end = nullptr;
    const std::string t = py_strip(v.as_str(), Value(), true, true).text();
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == 0) return Value(d);
  }
  return def.is_undefined() ? Value(0.0) : def;
}

List sorted(const Value& v, Args& a, size_t first_arg) {
  const bool reverse = a.get(first_arg, "reverse").truthy();
  const bool cs = a.get(first_arg + 1, "case_sensitive").truthy();
  const Value attr = a.get(first_arg + 2, "attribute");
  List out = iterate(v);
  auto key = [&](const Value& x) { return lowered(attr.is_undefined() ? x : path_of(x, attr.to_str().text()), cs); };
  std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
    const int c = compare(key(x), key(y));
    return reverse ? c > 0 : c < 0;
  });
  return out;
}

Value f_sort(const Env&, const Value& v, Args& a) { return Value(sorted(v, a, 0)); }

Value f_unique(const Env&, const Value& v, Args& a) {
  const bool cs = a.get(0, "case_sensitive").truthy();
  const Value attr = a.get(1, "attribute");
  List out, seen;
  for (const Value& e : iterate(v)) {
    const Value k = lowered(attr.is_undefined() ? e : path_of(e, attr.to_str().text()), cs);
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
    seen.push_back(k);
    out.push_back(e);
  }
  return Value(std::move(out));
}

Value min_max(const Value& v, Args& a, bool max) {
  Args b;
  b.pos = {Value(false), a.get(0, "case_sensitive"), a.get(1, "attribute")};
  const List s = sorted(v, b, 0);
  if (s.empty()) return Value();
  return max ? s.back() : s.front();
}
Value f_min(const Env&, const Value& v, Args& a) { return min_max(v, a, false); }
Value f_max(const Env&, const Value& v, Args& a) { return min_max(v, a, true); }

Value f_first(const Env&, const Value& v, Args&) {
  const List l = iterate(v);
  return l.empty() ? Value() : l.front();
}
Value f_last(const Env&, const Value& v, Args&) {
  const List l = iterate(v);
  return l.empty() ? Value() : l.back();
}
Value f_reverse(const Env&, const Value& v, Args&) {
  if (v.is_string()) {
    List chars = iterate(v);
    Str out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->as_str());
    return Value(out);
  }
  List l = iterate(v);
  std::reverse(l.begin(), l.end());
  return Value(std::move(l));
}

Value f_sum(const Env&, const Value& v, Args& a) {
  const Value attr = a.get(0, "attribute"), start = a.get(1, "start");
  bool is_float = start.kind() == Value::Kind::kFloat;
  double d = start.is_undefined() ? 0 : start.as_number();
  int64_t i = start.kind() == Value::Kind::kInt ? start.as_int() : 0;
  for (const Value& e : iterate(v)) {
    const Value x = attr.is_undefined() ? e : path_of(e, attr.to_str().text());
    if (!x.is_number() && x.kind() != Value::Kind::kBool) type_error("unsupported operand type(s) for +: 'int' and '" + x.type_name() + "'");
    is_float = is_float || x.kind() == Value::Kind::kFloat;
    d += x.as_number();
    if (!is_float) i = int_add(i, x.kind() == Value::Kind::kInt ? x.as_int() : int64_t(x.as_bool()));
  }
  return is_float ? Value(d) : Value(i);
}

Value f_abs(const Env&, const Value& v, Args&) {
  if (v.kind() == Value::Kind::kInt) return Value(v.as_int() < 0 ? int_sub(0, v.as_int()) : v.as_int());
  return Value(std::fabs(v.as_number()));
}

Value f_round(const Env&, const Value& v, Args& a) {
  const Value p = a.get(0, "precision"), m = a.get(1, "method");
  const double scale = std::pow(10.0, p.kind() == Value::Kind::kInt ? double(p.as_int()) : 0.0);
  const std::string method = m.is_string() ? m.text() : "common";
  const double x = v.as_number() * scale;
  const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
  return Value(r / scale);
}

Value f_escape(const Env&, const Value& v, Args&) {
  if (v.is_string() && v.as_str().safe()) return v;
  Str out;
  const Str src = v.to_str();
  for (const auto& [piece, content] : src.pieces()) {
    std::string t;
    for (char c : piece) {
      switch (c) {
        case '&': t += "&amp;"; break;
        case '<': t += "&lt;"; break;
        case '>': t += "&gt;"; break;
        case '"': t += "&#34;"; break;
        case '\'': t += "&#39;"; break;
        default: t += c;
      }
    }
    out.append(Str(std::move(t), content));
  }
  return Value(out.mark_safe());
}

Value f_forceescape(const Env& env, const Value& v, Args& a) { return f_escape(env, Value(v.to_str()), a); }

Value f_attr(const Env&, const Value& v, Args& a) { return get_attr(v, (a.get(0, "name")).to_str().text()); }

Value f_wordcount(const Env&, const Value& v, Args&) {
  return Value(int64_t(py_split(v.to_str(), Value(), -1).list().size()));
}

// "%s" % args: %s, %d, %r and %% only.
Value f_format(const Env&, const Value& v, Args& a) {
  const Str fmt = v.to_str();
  const std::string& f = fmt.text();
  Str out;
  size_t k = 0, lit = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) continue;
    out.append(fmt.slice(lit, i));
    const char c = f[i + 1];
    if (c == '%') {
      out.append_markup("%");
    } else {
      if (k >= a.pos.size()) type_error("not enough arguments for format string");
      const Value& x = a.pos[k++];
      if (c == 's') out.append(x.to_str());
      else if (c == 'd') out.append(Str(std::to_string(int_of(x.as_number())), x.has_content()));
      else if (c == 'r') out.append(Str(x.repr(), x.has_content()));
      else type_error(std::string("unsupported format character '") + c + "'");
    }
    lit = ++i + 1;
  }
  out.append(fmt.slice(lit, f.size()));
  return Value(out);
}

Value f_center(const Env&, const Value& v, Args& a) {
  const Str s = v.to_str();
  const Value w = a.get(0, "width");
  const int64_t width = w.kind() == Value::Kind::kInt ? std::min<int64_t>(w.as_int(), 1 << 20) : 80;
  const int64_t n = int64_t(utf8_length(s.text()));
  if (width <= n) return Value(s);
  const int64_t pad = width - n, left = pad / 2 + (pad & width & 1);
  Str out(std::string(size_t(left), ' '));
  out.append(s);
  out.append_markup(std::string(size_t(pad - left), ' '));
  return Value(out);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> m = {
      {"tojson", f_tojson},     {"length", f_length},       {"count", f_length},     {"default", f_default},
      {"d", f_default},         {"trim", f_trim},           {"string", f_string},    {"safe", f_safe},
      {"join", f_join},         {"upper", f_upper},         {"lower", f_lower},      {"capitalize", f_capitalize},
      {"title", f_title},       {"items", f_items},         {"dictsort", f_dictsort}, {"list", f_list},
      {"replace", f_replace},   {"indent", f_indent},       {"select", f_select},    {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map},   {"int", f_int},
      {"float", f_float},       {"sort", f_sort},           {"unique", f_unique},    {"min", f_min},
      {"max", f_max},           {"first", f_first},         {"last", f_last},        {"reverse", f_reverse},
      {"sum", f_sum},           {"abs", f_abs},             {"round", f_round},      {"e", f_escape},
      {"escape", f_escape},     {"forceescape", f_forceescape},  {"attr", f_attr},        {"wordcount", f_wordcount},
      {"format", f_format},     {"center", f_center},
  };
  return m;
}

bool t_divisible(const Value& v, const Value& n) {
  if (v.kind() != Value::Kind::kInt || n.kind() != Value::Kind::kInt || n.as_int() == 0)
    type_error("divisibleby needs integers");
  return v.as_int() % n.as_int() == 0;
}

bool case_is(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.text()) {
    if (std::islower(static_cast<unsigned char>(c))) {
      if (upper) return false;
      cased = true;
    } else if (std::isupper(static_cast<unsigned char>(c))) {
      if (!upper) return false;
      cased = true;
    }
  }
  return cased;
}

}  // namespace

bool value_in(const Value& x, const Value& seq) {
  switch (seq.kind()) {
    case Value::Kind::kString:
      if (!x.is_string()) type_error("'in <string>' requires string as left operand, not " + x.type_name());
      return seq.text().find(x.text()) != std::string::npos;
    case Value::Kind::kList: return std::find(seq.list().begin(), seq.list().end(), x) != seq.list().end();
    case Value::Kind::kDict: return x.is_string() && seq.dict().find(x.text()) != nullptr;
    case Value::Kind::kUndefined: return false;
    default: type_error("argument of type '" + seq.type_name() + "' is not iterable");
  }
}

std::optional<Value> apply_filter(const Env& env, const std::string& name, const Value& v, Args& args) {
  const auto& m = filters();
  const auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second(env, v, args);
}

std::optional<bool> apply_test(const std::string& n, const Value& v, Args& a) {
  using K = Value::Kind;
  const K k = v.kind();
  const Value arg = a.get(0, "");
  if (n == "defined") return k != K::kUndefined;
  if (n == "undefined") return k == K::kUndefined;
  if (n == "none") return k == K::kNone;
  if (n == "string") return k == K::kString;
  if (n == "mapping") return k == K::kDict;
  if (n == "iterable") return k == K::kString || k == K::kList || k == K::kDict || k == K::kUndefined;
  if (n == "sequence") return k == K::kString || k == K::kList || k == K::kDict;
  if (n == "number") return k == K::kInt || k == K::kFloat || k == K::kBool;
  if (n == "integer") return k == K::kInt;
  if (n == "float") return k == K::kFloat;
  if (n == "boolean") return k == K::kBool;
  if (n == "true") return k == K::kBool && v.as_bool();
  if (n == "false") return k == K::kBool && !v.as_bool();
  if (n == "callable") return k == K::kCallable;
  if (n == "eq" || n == "equalto" || n == "==") return v == arg;
  if (n == "ne" || n == "!=") return !(v == arg);
  if (n == "lt" || n == "lessthan" || n == "<") return compare(v, arg) < 0;
  if (n == "le" || n == "<=") return compare(v, arg) <= 0;
  if (n == "gt" || n == "greaterthan" || n == ">") return compare(v, arg) > 0;
  if (n == "ge" || n == ">=") return compare(v, arg) >= 0;
  if (n == "in") return value_in(v, arg);
  if (n == "odd" || n == "even") {
    if (k != K::kInt) type_error("odd/even need an integer");
    return (v.as_int() % 2 != 0) == (n == "odd");
  }
  if (n == "divisibleby") return t_divisible(v, arg);
  if (n == "lower") return case_is(v, false);
  if (n == "upper") return case_is(v, true);
  if (n == "sameas") {
    if (k != arg.kind()) return false;
    if (k == K::kList) return v.list_ptr() == arg.list_ptr();
    if (k == K::kDict) return v.dict_ptr() == arg.dict_ptr();
    return k == K::kNone || k == K::kUndefined || (k == K::kBool && v == arg);
  }
  if (n == "escaped") return false;
  if (n == "filter") return arg.is_string() && filters().count(arg.text()) > 0;
  if (n == "test") {
    if (!arg.is_string()) return false;
    Args none;
    try {
      return apply_test(arg.text(), Value(), none).has_value();
    } catch (const TemplateError&) {
      return true;
    }
  }
  return std::nullopt;
}

}  // namespace cs::jinja
