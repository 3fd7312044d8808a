// The filters, tests and Python methods templates call (internal to the
// jinja floor). Each throws TemplateError{kType} (or kUndefined) with the
// Python-style reason; the renderer adds the line.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace cs::jinja {

// Calls back into the renderer: a filter or test by name (map, select).
struct Env {
  std::function<Value(const std::string& filter, const Value& v, Args& args)> filter;
  std::function<bool(const std::string& test, const Value& v, Args& args)> test;
};

// Each returns nullopt when no filter/test of that name exists.
std::optional<Value> apply_filter(const Env& env, const std::string& name, const Value& v, Args& args);
std::optional<bool> apply_test(const std::string& name, const Value& v, Args& args);
// obj.name: a bound method of a str, dict or list, else nullopt.
std::optional<Value> method(const Value& obj, const std::string& name);

// Python str helpers shared by filters and methods; they keep the marks.
Str py_strip(const Str& s, const Value& chars, bool left, bool right);
Value py_split(const Str& s, const Value& sep, int64_t maxsplit);
Str py_replace(const Str& s, const std::string& old, const Str& with, int64_t count);
Str py_capitalize(const Str& s);
// Lines split at \n, \r\n and \r, without the line ends.
std::vector<Str> py_splitlines(const Str& s);
// f applied to each ASCII byte (upper, lower), marks kept.
Str map_ascii(const Str& s, int (*f)(int));
// A dict's (key, value) pairs, each a two-item list.
List dict_items(const Dict& d);
// jinja2's getattr(obj, name): a method, else an item of a dict; undefined if
// none (attribute of undefined is an error for the caller to raise).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
[[noreturn]] void type_error(const std::string& what);
// int64 arithmetic that raises "integer overflow" instead of wrapping:
// Python's ints do not overflow, and no template needs 2^63.
int64_t int_add(int64_t a, int64_t b);
int64_t int_sub(int64_t a, int64_t b);
int64_t int_mul(int64_t a, int64_t b);
// Python's int(x) for a finite float (truncation), or "integer overflow".
int64_t int_of(double x);
// A run of decimal digits as an int, or "integer overflow".
int64_t int_of_digits(const std::string& digits);
// The items a for loop sees: a list's items, a dict's keys, a string's
// characters; nothing for undefined; a type error for anything else.
List iterate(const Value& v);
// Python's `x in seq`.
bool value_in(const Value& x, const Value& seq);

}  // namespace cs::jinja
