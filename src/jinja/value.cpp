#include "jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"

namespace cs::jinja {

// ---- Str ----

Str::Str(std::string text, bool content) : text_(std::move(text)) {
  if (content && !text_.empty()) runs_.push_back({uint32_t(text_.size()), true});
}

bool Str::has_content() const {
  return std::any_of(runs_.begin(), runs_.end(), [](const auto& r) { return r.second; });
}

void Str::append(const Str& s) {
  if (s.text_.empty()) return;
  if (runs_.empty() && s.runs_.empty()) {
    text_ += s.text_;
    return;
  }
  if (runs_.empty() && !text_.empty()) runs_.push_back({uint32_t(text_.size()), false});
  auto add = [this](uint32_t n, bool content) {
    if (!runs_.empty() && runs_.back().second == content)
      runs_.back().first += n;
    else
      runs_.push_back({n, content});
  };
  if (s.runs_.empty())
    add(uint32_t(s.text_.size()), false);
  else
    for (const auto& [n, c] : s.runs_) add(n, c);
  text_ += s.text_;
}

void Str::append_markup(std::string_view s) { append(Str(std::string(s))); }

Str Str::slice(size_t begin, size_t end) const {
  end = std::min(end, text_.size());
  begin = std::min(begin, end);
  if (runs_.empty()) return Str(text_.substr(begin, end - begin));
  Str out;
  size_t at = 0;
  for (const auto& [n, content] : runs_) {
    const size_t b = std::max(at, begin), e = std::min(at + n, end);
    if (b < e) out.append(Str(text_.substr(b, e - b), content));
    at += n;
  }
  return out;
}

std::vector<std::pair<std::string_view, bool>> Str::pieces() const {
  std::vector<std::pair<std::string_view, bool>> out;
  if (text_.empty()) return out;
  if (runs_.empty()) return {{text_, false}};
  size_t at = 0;
  for (const auto& [n, content] : runs_) {
    out.push_back({std::string_view(text_).substr(at, n), content});
    at += n;
  }
  return out;
}

// ---- Dict, Args ----

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Dict::key(const std::string& k) const {
  for (const std::string& i : int_keys)
    if (i == k) return Value(int64_t(std::stoll(k)));
  return Value(k);
}

Value Args::get(size_t i, std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return i < pos.size() ? pos[i] : Value();
}

// ---- Value ----

Value Value::none() {
  Value v;
  v.v_ = nullptr;
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, bool content) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? Value(double(u)) : Value(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(Str(j.get<std::string>(), content));
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e, content));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, e] : j.items()) d->set(k, from_json(e, content));
      return Value(d);
    }
    default: return none();
  }
}

Value::Kind Value::kind() const { return Kind(v_.index()); }

double Value::as_number() const {
  switch (kind()) {
    case Kind::kBool: return as_bool() ? 1 : 0;
    case Kind::kInt: return double(as_int());
    case Kind::kFloat: return std::get<double>(v_);
    default: throw Error("expected a number, got " + type_name());
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return std::get<double>(v_) != 0;
    case Kind::kString: return !text().empty();
    case Kind::kList: return !list().empty();
    case Kind::kDict: return !dict().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

bool Value::has_content() const {
  switch (kind()) {
    case Kind::kString: return as_str().has_content();
    case Kind::kList:
      return std::any_of(list().begin(), list().end(), [](const Value& v) { return v.has_content(); });
    case Kind::kDict:
      return std::any_of(dict().items.begin(), dict().items.end(),
                         [](const auto& kv) { return kv.second.has_content(); });
    default: return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[40];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf = [-]D[.DDD]e[+-]XX: its digits and decimal exponent.
  std::string s(buf);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e_at = s.find('e');
  const int exp = std::atoi(s.c_str() + e_at + 1);
  std::string digits;
  for (size_t i = 0; i < e_at; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp) + 1));
      ip.resize(size_t(exp) + 1, '0');
      const std::string fp = digits.size() > size_t(exp) + 1 ? digits.substr(size_t(exp) + 1) : "0";
      out = ip + "." + fp;
    } else {
      out = "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string py_quote(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + char(q);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + char(q);
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;  // < 0: one line
  const std::string& item_sep;
  const std::string& key_sep;
  bool sort_keys;
  std::string out;

  void newline(int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent) * size_t(level), ' ');
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
      case Value::Kind::kFloat: {
        const double d = v.as_number();
        out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
        return;
      }
      case Value::Kind::kString: json_string(v.text(), out); return;
      case Value::Kind::kList: {
        if (v.list().empty()) {
          out += "[]";
          return;
        }
        out += '[';
        bool first = true;
        for (const Value& e : v.list()) {
          if (!first) out += item_sep;
          first = false;
          newline(level + 1);
          write(e, level + 1);
        }
        newline(level);
        out += ']';
        return;
      }
      case Value::Kind::kDict: {
        if (v.dict().items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.dict().items) items.push_back(&kv);
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        bool first = true;
        for (const auto* kv : items) {
          if (!first) out += item_sep;
          first = false;
          newline(level + 1);
          json_string(kv->first, out);
          out += key_sep;
          write(kv->second, level + 1);
        }
        newline(level);
        out += '}';
        return;
      }
      default: throw Error("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

std::string Value::to_json(int indent, const std::string& item_sep, const std::string& key_sep,
                           bool sort_keys) const {
  JsonWriter w{indent, item_sep, key_sep, sort_keys, {}};
  w.write(*this, 0);
  return std::move(w.out);
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return py_quote(text());
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list().size(); ++i) out += (i ? ", " : "") + list()[i].repr();
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict().items) {
        out += (first ? "" : ", ") + dict().key(k).repr() + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    default: return to_str().text();
  }
}

Str Value::to_str() const {
  switch (kind()) {
    case Kind::kUndefined: return Str();
    case Kind::kNone: return Str("None");
    case Kind::kBool: return Str(as_bool() ? "True" : "False");
    case Kind::kInt: return Str(std::to_string(as_int()));
    case Kind::kFloat: return Str(float_repr(as_number()));
    case Kind::kString: return as_str();
    case Kind::kList:
    case Kind::kDict: return Str(repr(), has_content());
    case Kind::kCallable: return Str("<function " + callable().name + ">");
  }
  return Str();
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return dict().is_namespace ? "Namespace" : "dict";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  using K = Value::Kind;
  const K ka = a.kind(), kb = b.kind();
  if (a.is_number() || ka == K::kBool) {
    if (!(b.is_number() || kb == K::kBool)) return false;
    if (ka == K::kFloat || kb == K::kFloat) return a.as_number() == b.as_number();
    const int64_t x = ka == K::kBool ? int64_t(a.as_bool()) : a.as_int();
    const int64_t y = kb == K::kBool ? int64_t(b.as_bool()) : b.as_int();
    return x == y;
  }
  if (ka != kb) return false;
  switch (ka) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.text() == b.text();
    case K::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!(a.list()[i] == b.list()[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* w = b.dict().find(k);
        if (!w || !(v == *w)) return false;
      }
      return true;
    }
    case K::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  const bool an = a.is_number() || a.kind() == Value::Kind::kBool;
  const bool bn = b.is_number() || b.kind() == Value::Kind::kBool;
  if (an && bn) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt)
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.text().compare(b.text());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (const int c = compare(x[i], y[i])) return c;
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

size_t utf8_offset(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t at = 0; at < s.size(); ++at) {
    if ((static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) continue;
    if (i == index) return at;
    ++i;
  }
  return s.size();
}

}  // namespace cs::jinja
