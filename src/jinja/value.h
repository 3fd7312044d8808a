// The values a Jinja template computes with, modelled on the Python objects
// jinja2 hands templates (HF chat templates are written against jinja2):
// undefined, None, bool, int, float, str, list, dict, and callables (macros,
// globals, bound methods). Lists and dicts are shared by reference, as in
// Python; dicts keep insertion order.
//
// Every string remembers which of its bytes came from the template's own text
// (markup) and which from the caller's data (content: a message, a tool
// definition). Concatenation, slicing and trimming keep the marks byte for
// byte; any other transformation of a string holding content is content as a
// whole. The chat layer tokenizes special tokens only in markup, so a user
// who types "<|im_start|>" cannot forge a turn however the template moves the
// text around.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace cs::jinja {

// A string with its marks: runs of (byte count, is content) covering the text.
// No runs means all markup, the common case of template literals.
class Str {
 public:
  Str() = default;
  Str(std::string text, bool content = false);  // NOLINT: literals convert
  const std::string& text() const { return text_; }
  bool has_content() const;
  // jinja2's Markup (from |safe or |e): `markup + str` escapes the str.
  bool safe() const { return safe_; }
  Str& mark_safe(bool safe = true) {
    safe_ = safe;
    return *this;
  }
  void append(const Str& s);
  void append_markup(std::string_view s);
  Str slice(size_t begin, size_t end) const;  // bytes [begin, end)
  // (text, is content) pieces, adjacent pieces of one kind merged.
  std::vector<std::pair<std::string_view, bool>> pieces() const;

 private:
  std::string text_;
  std::vector<std::pair<uint32_t, bool>> runs_;  // empty: all markup
  bool safe_ = false;
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
using Builtin = std::function<Value(Args&)>;

struct Callable {
  std::string name;
  Builtin fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value none();
  Value(bool b) : v_(b) {}                      // NOLINT
  Value(int64_t i) : v_(i) {}                   // NOLINT
  Value(int i) : v_(int64_t(i)) {}              // NOLINT
  Value(double d) : v_(d) {}                    // NOLINT
  Value(Str s) : v_(std::move(s)) {}            // NOLINT
  Value(std::string s) : v_(Str(std::move(s))) {}  // NOLINT
  Value(const char* s) : v_(Str(s)) {}          // NOLINT
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}  // NOLINT
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}         // NOLINT
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}         // NOLINT
  Value(Callable c) : v_(std::make_shared<Callable>(std::move(c))) {}  // NOLINT

  // A JSON document as Python's json.loads gives it; strings are content
  // when `content` (data from a request), markup otherwise.
  static Value from_json(const nlohmann::ordered_json& j, bool content);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_number() const;
  const Str& as_str() const { return std::get<Str>(v_); }
  const std::string& text() const { return as_str().text(); }
  List& list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const std::shared_ptr<List>& list_ptr() const { return std::get<std::shared_ptr<List>>(v_); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }

  bool truthy() const;
  // Whether any string inside (recursively) holds content.
  bool has_content() const;
  // Python's str(): what {{ value }} prints (undefined prints nothing).
  Str to_str() const;
  // Python's repr(), as str() shows the items of a list or dict.
  std::string repr() const;
  // Python's json.dumps(value, ensure_ascii=False, indent=, separators=, sort_keys=).
  std::string to_json(int indent, const std::string& item_sep, const std::string& key_sep,
                      bool sort_keys) const;
  // A name for messages: "str", "int", "list", "dict", ... (Python's type names).
  std::string type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, Str, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Callable>>
      v_;
};

// A dict, in insertion order. A namespace() object is a dict whose entries
// are also its attributes and may be assigned with {% set ns.x = ... %}.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::vector<std::string> int_keys;  // keys written as integers ({1024: 256}), as text
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  // A key as Python sees it: an int for the integer keys, else the string.
  Value key(const std::string& k) const;
};

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // The argument at position i or named `name`, else undefined.
  Value get(size_t i, std::string_view name) const;
};

// Python's three-way comparison of numbers or of strings; throws cs::Error
// for anything else (Python's TypeError).
int compare(const Value& a, const Value& b);
// Python's float repr: the shortest text that reads back to the same double.
std::string float_repr(double d);
// The number of code points of UTF-8 text (Python's len of a str).
size_t utf8_length(std::string_view s);
// The byte offset of code point `index` (clamped to the text's end).
size_t utf8_offset(std::string_view s, size_t index);

}  // namespace cs::jinja
