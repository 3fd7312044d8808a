// Python's str, dict and list methods as templates call them, and jinja2's
// attribute and item lookup.
#include <algorithm>
#include <cmath>
#include <set>

#include "base/utf8.h"
#include "jinja/builtins.h"
#include "jinja/error.h"

namespace cs::jinja {

void type_error(const std::string& what) { throw TemplateError(TemplateErrorKind::kType, 0, what); }

int64_t int_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) type_error("integer overflow");
  return r;
}
int64_t int_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) type_error("integer overflow");
  return r;
}
int64_t int_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) type_error("integer overflow");
  return r;
}

int64_t int_of(double x) {
  // 2^63 is exact as a double; int64 holds [-2^63, 2^63).
  constexpr double kTwo63 = 9223372036854775808.0;
  const double t = std::trunc(x);
  if (!(t >= -kTwo63 && t < kTwo63)) type_error("integer overflow");
  return static_cast<int64_t>(t);
}

int64_t int_of_digits(const std::string& digits) {
  int64_t r = 0;
  for (char c : digits) r = int_add(int_mul(r, 10), c - '0');
  return r;
}

namespace {

// Python's str.isspace for ASCII, plus the C1 next-line and no-break space.
bool py_space(std::string_view s, size_t at, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[at]);
  *len = 1;
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
  if (c == 0xC2 && at + 1 < s.size() && (static_cast<unsigned char>(s[at + 1]) == 0x85 ||
                                         static_cast<unsigned char>(s[at + 1]) == 0xA0)) {
    *len = 2;
    return true;
  }
  return false;
}

// Whether the code point at `at` is one of `chars` (a string of code points).
bool in_chars(std::string_view s, size_t at, std::string_view chars, size_t* len) {
  *len = utf8_len(s, at);
  const std::string_view cp = s.substr(at, *len);
  for (size_t k = 0; k < chars.size(); k += utf8_len(chars, k))
    if (chars.substr(k, utf8_len(chars, k)) == cp) return true;
  return false;
}

Value bound(const std::string& name, Builtin fn) { return Value(Callable{name, std::move(fn)}); }

int64_t int_arg(const Value& v, const char* what) {
  if (v.kind() == Value::Kind::kInt) return v.as_int();
  if (v.kind() == Value::Kind::kBool) return v.as_bool();
  type_error(std::string(what) + " must be an integer, not " + v.type_name());
}

bool ascii_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)); }

Str py_title(const Str& s) {
  // Python's str.title: a letter after a non-letter is upper case, others lower.
  Str out;
  bool prev_letter = false;
  for (const auto& [piece, content] : s.pieces()) {
    std::string t(piece);
    for (char& c : t) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        prev_letter = true;
        continue;
      }
      c = char(prev_letter ? std::tolower(c) : std::toupper(c));
      prev_letter = ascii_alpha(c);
    }
    out.append(Str(std::move(t), content));
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& arg, bool start) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_string()) return one(arg.text());
  if (arg.is_list()) {
    for (const Value& p : arg.list()) {
      if (!p.is_string()) type_error("a tuple for startswith/endswith must hold strings");
      if (one(p.text())) return true;
    }
    return false;
  }
  type_error(std::string(start ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " +
             arg.type_name());
}

// Python's str.format: {} {0} {name}, with no format specs beyond none.
Str py_format(const Str& fmt, Args& a) {
  const std::string& f = fmt.text();
  Str out;
  size_t auto_index = 0, lit = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out.append(fmt.slice(lit, i + 1));
      lit = ++i + 1;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out.append(fmt.slice(lit, i + 1));
      lit = ++i + 1;
    } else if (f[i] == '{') {
      const size_t e = f.find('}', i);
      if (e == std::string::npos) type_error("Single '{' encountered in format string");
      out.append(fmt.slice(lit, i));
      const std::string field = f.substr(i + 1, e - i - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        type_error("format specifications in str.format are not supported");
      Value v;
      if (field.empty()) {
        v = auto_index < a.pos.size() ? a.pos[auto_index] : Value();
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char c) { return std::isdigit(c); })) {
        const size_t k = std::stoul(field);
        v = k < a.pos.size() ? a.pos[k] : Value();
      } else {
        v = a.get(SIZE_MAX, field);
      }
      if (v.is_undefined()) type_error("Replacement index " + field + " out of range for positional args tuple");
      out.append(v.to_str());
      lit = e + 1;
      i = e;
    }
  }
  out.append(fmt.slice(lit, f.size()));
  return out;
}

std::optional<Value> str_method(const Value& self, const std::string& n) {
  const Str s = self.as_str();
  if (n == "strip" || n == "lstrip" || n == "rstrip")
    return bound(n, [s, n](Args& a) {
      return Value(py_strip(s, a.get(0, "chars"), n != "rstrip", n != "lstrip"));
    });
  if (n == "split" || n == "rsplit")
    return bound(n, [s, n](Args& a) {
      const Value ms = a.get(1, "maxsplit");
      const int64_t maxsplit = ms.is_undefined() ? -1 : int_arg(ms, "maxsplit");
      if (n == "rsplit" && maxsplit >= 0) {
        // Split from the right: split fully, then join the leading extras.
        Value all = py_split(s, a.get(0, "sep"), -1);
        List& parts = all.list();
        if (int64_t(parts.size()) <= maxsplit + 1) return all;
        const Value sep = a.get(0, "sep");
        if (sep.is_undefined() || sep.is_none()) type_error("rsplit with maxsplit and no sep is not supported");
        const size_t keep = parts.size() - size_t(maxsplit);
        Str head;
        for (size_t i = 0; i < keep; ++i) {
          if (i) head.append(sep.as_str());
          head.append(parts[i].as_str());
        }
        List out{Value(head)};
        out.insert(out.end(), parts.begin() + long(keep), parts.end());
        return Value(std::move(out));
      }
      return py_split(s, a.get(0, "sep"), maxsplit);
    });
  if (n == "startswith" || n == "endswith")
    return bound(n, [s, n](Args& a) { return Value(starts_or_ends(s.text(), a.get(0, "prefix"), n == "startswith")); });
  if (n == "lower") return bound(n, [s](Args&) { return Value(map_ascii(s, [](int c) { return std::tolower(c); })); });
  if (n == "upper") return bound(n, [s](Args&) { return Value(map_ascii(s, [](int c) { return std::toupper(c); })); });
  if (n == "title") return bound(n, [s](Args&) { return Value(py_title(s)); });
  if (n == "capitalize") return bound(n, [s](Args&) { return Value(py_capitalize(s)); });
  if (n == "replace")
    return bound(n, [s](Args& a) {
      const Value old = a.get(0, "old"), with = a.get(1, "new"), count = a.get(2, "count");
      if (!old.is_string() || !with.is_string()) type_error("replace() arguments must be str");
      return Value(py_replace(s, old.text(), with.as_str(), count.is_undefined() ? -1 : int_arg(count, "count")));
    });
  if (n == "format") return bound(n, [s](Args& a) { return Value(py_format(s, a)); });
  if (n == "join")
    return bound(n, [s](Args& a) {
      const Value items = a.get(0, "iterable");
      if (!items.is_list()) type_error("join() takes a list");
      Str out;
      for (size_t i = 0; i < items.list().size(); ++i) {
        if (!items.list()[i].is_string()) type_error("sequence item " + std::to_string(i) + ": expected str instance");
        if (i) out.append(s);
        out.append(items.list()[i].as_str());
      }
      return Value(out);
    });
  if (n == "find" || n == "rfind" || n == "count" || n == "index")
    return bound(n, [s, n](Args& a) {
      const Value sub = a.get(0, "sub");
      if (!sub.is_string()) type_error(n + "() argument must be str");
      const std::string& t = s.text();
      if (n == "count") {
        if (sub.text().empty()) return Value(int64_t(utf8_length(t) + 1));
        int64_t c = 0;
        for (size_t p = t.find(sub.text()); p != std::string::npos; p = t.find(sub.text(), p + sub.text().size())) ++c;
        return Value(c);
      }
      const size_t p = n == "rfind" ? t.rfind(sub.text()) : t.find(sub.text());
      if (p == std::string::npos) {
        if (n == "index") type_error("substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(utf8_length(std::string_view(t).substr(0, p))));
    });
  auto all_of = [&](const std::string& name, bool (*pred)(unsigned char)) {
    return bound(name, [s, pred](Args&) {
      const std::string& t = s.text();
      return Value(!t.empty() && std::all_of(t.begin(), t.end(), [pred](char c) { return pred(static_cast<unsigned char>(c)); }));
    });
  };
  if (n == "isdigit") return all_of(n, [](unsigned char c) { return bool(std::isdigit(c)); });
  if (n == "isalpha") return all_of(n, [](unsigned char c) { return bool(std::isalpha(c)); });
  if (n == "isalnum") return all_of(n, [](unsigned char c) { return bool(std::isalnum(c)); });
  if (n == "isspace") return all_of(n, [](unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); });
  if (n == "splitlines")
    return bound(n, [s](Args&) {
      List out;
      for (Str& line : py_splitlines(s)) out.push_back(Value(std::move(line)));
      return Value(std::move(out));
    });
  return std::nullopt;
}

const std::set<std::string>& mutators() {
  static const std::set<std::string> m = {"append", "pop",    "extend",     "insert", "remove", "clear",
                                          "sort",   "reverse", "update",    "popitem", "setdefault", "add",
                                          "discard"};
  return m;
}

std::optional<Value> dict_method(const Value& self, const std::string& n) {
  const std::shared_ptr<Dict> d = self.dict_ptr();
  if (n == "get")
    return bound(n, [d](Args& a) {
      const Value k = a.get(0, "key");
      const Value* v = k.is_string() ? d->find(k.text()) : nullptr;
      if (v) return *v;
      const Value def = a.get(1, "default");
      return def.is_undefined() ? Value::none() : def;
    });
  if (n == "items") return bound(n, [d](Args&) { return Value(dict_items(*d)); });
  if (n == "keys")
    return bound(n, [d](Args&) {
      List out;
      for (const auto& kv : d->items) out.push_back(d->key(kv.first));
      return Value(std::move(out));
    });
  if (n == "values")
    return bound(n, [d](Args&) {
      List out;
      for (const auto& kv : d->items) out.push_back(kv.second);
      return Value(std::move(out));
    });
  if (n == "copy") return bound(n, [d](Args&) { return Value(std::make_shared<Dict>(*d)); });
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& n) {
  const std::shared_ptr<List> l = self.list_ptr();
  if (n == "index" || n == "count")
    return bound(n, [l, n](Args& a) {
      const Value x = a.get(0, "value");
      int64_t c = 0;
      for (size_t i = 0; i < l->size(); ++i) {
        if (!((*l)[i] == x)) continue;
        if (n == "index") return Value(int64_t(i));
        ++c;
      }
      if (n == "index") type_error(x.repr() + " is not in list");
      return Value(c);
    });
  if (n == "copy") return bound(n, [l](Args&) { return Value(List(*l)); });
  return std::nullopt;
}

}  // namespace

Str py_strip(const Str& s, const Value& chars, bool left, bool right) {
  const std::string& t = s.text();
  const bool ws = chars.is_undefined() || chars.is_none();
  if (!ws && !chars.is_string()) type_error("strip arg must be None or str");
  auto strippable = [&](size_t at, size_t* len) {
    return ws ? py_space(t, at, len) : in_chars(t, at, chars.text(), len);
  };
  size_t b = 0, e = t.size(), len = 0;
  if (left)
    while (b < e && strippable(b, &len)) b += len;
  if (right)
    while (e > b) {
      size_t at = e - 1;
      while (at > b && (static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) --at;
      if (ws && at > b && static_cast<unsigned char>(t[at - 1]) == 0xC2 && py_space(t, at - 1, &len) && len == 2) --at;
      if (!strippable(at, &len) || at + len != e) break;
      e = at;
    }
  return s.slice(b, e);
}

Value py_split(const Str& s, const Value& sep, int64_t maxsplit) {
  const std::string& t = s.text();
  List out;
  if (sep.is_undefined() || sep.is_none()) {
    size_t i = 0, len = 0;
    while (i < t.size()) {
      while (i < t.size() && py_space(t, i, &len)) i += len;
      if (i >= t.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t e = t.size();
        while (e > i && py_space(t, e - 1, &len)) --e;
        out.push_back(Value(s.slice(i, e)));
        break;
      }
      size_t j = i;
      while (j < t.size() && !py_space(t, j, &len)) ++j;
      out.push_back(Value(s.slice(i, j)));
      i = j;
    }
    return Value(std::move(out));
  }
  if (!sep.is_string()) type_error("must be str or None, not " + sep.type_name());
  const std::string& p = sep.text();
  if (p.empty()) type_error("empty separator");
  size_t b = 0;
  for (size_t at = t.find(p); at != std::string::npos; at = t.find(p, b)) {
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) break;
    out.push_back(Value(s.slice(b, at)));
    b = at + p.size();
  }
  out.push_back(Value(s.slice(b, t.size())));
  return Value(std::move(out));
}

Str py_replace(const Str& s, const std::string& old, const Str& with, int64_t count) {
  const std::string& t = s.text();
  Str out;
  if (old.empty()) {
    // Python inserts `with` between code points (and at both ends).
    size_t b = 0;
    int64_t n = 0;
    for (size_t i = 0; i <= t.size(); i += i < t.size() ? utf8_len(t, i) : 1) {
      if (count >= 0 && n >= count) break;
      out.append(s.slice(b, i));
      out.append(with);
      b = i;
      ++n;
    }
    out.append(s.slice(b, t.size()));
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  for (size_t at = t.find(old); at != std::string::npos && (count < 0 || n < count); at = t.find(old, b), ++n) {
    out.append(s.slice(b, at));
    out.append(with);
    b = at + old.size();
  }
  out.append(s.slice(b, t.size()));
  return out;
}

Str map_ascii(const Str& s, int (*f)(int)) {
  Str out;
  for (const auto& [piece, content] : s.pieces()) {
    std::string t(piece);
    for (char& c : t)
      if (static_cast<unsigned char>(c) < 0x80) c = char(f(static_cast<unsigned char>(c)));
    out.append(Str(std::move(t), content));
  }
  return out;
}

Str py_capitalize(const Str& s) {
  const Str lower = map_ascii(s, [](int c) { return std::tolower(c); });
  if (s.text().empty()) return lower;
  Str out = map_ascii(lower.slice(0, 1), [](int c) { return std::toupper(c); });
  out.append(lower.slice(1, s.text().size()));
  return out;
}

std::vector<Str> py_splitlines(const Str& s) {
  std::vector<Str> out;
  const std::string& t = s.text();
  size_t b = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '\n' && t[i] != '\r') continue;
    out.push_back(s.slice(b, i));
    if (t[i] == '\r' && i + 1 < t.size() && t[i + 1] == '\n') ++i;
    b = i + 1;
  }
  if (b < t.size()) out.push_back(s.slice(b, t.size()));
  return out;
}

List dict_items(const Dict& d) {
  List out;
  for (const auto& [k, v] : d.items) out.push_back(Value(List{d.key(k), v}));
  return out;
}

std::optional<Value> method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict() && !obj.dict().is_namespace) {
    if (mutators().count(name)) type_error("access to attribute '" + name + "' of 'dict' object is unsafe");
    return dict_method(obj, name);
  }
  if (obj.is_list()) {
    if (mutators().count(name)) type_error("access to attribute '" + name + "' of 'list' object is unsafe");
    return list_method(obj, name);
  }
  return std::nullopt;
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict() && obj.dict().is_namespace) {
    const Value* v = obj.dict().find(name);
    return v ? *v : Value();
  }
  if (auto m = method(obj, name)) return *m;
  if (obj.is_dict()) {
    const Value* v = obj.dict().find(name);
    return v ? *v : Value();
  }
  return Value();
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict().find(key.text())) return *v;
      if (obj.dict().is_namespace) return Value();
      return get_attr(obj, key.text());
    }
    if (key.kind() == Value::Kind::kInt) {
      const std::string k = std::to_string(key.as_int());
      const auto& ik = obj.dict().int_keys;
      const Value* v = std::find(ik.begin(), ik.end(), k) != ik.end() ? obj.dict().find(k) : nullptr;
      return v ? *v : Value();
    }
    return Value();
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool) {
      int64_t i = key.kind() == Value::Kind::kBool ? key.as_bool() : key.as_int();
      if (obj.is_list()) {
        const int64_t n = int64_t(obj.list().size());
        if (i < 0) i += n;
        return i >= 0 && i < n ? obj.list()[size_t(i)] : Value();
      }
      const std::string& t = obj.text();
      const int64_t n = int64_t(utf8_length(t));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      const size_t b = utf8_offset(t, size_t(i)), e = utf8_offset(t, size_t(i) + 1);
      return Value(obj.as_str().slice(b, e));
    }
    if (key.is_string()) return get_attr(obj, key.text());
  }
  return Value();
}

}  // namespace cs::jinja
