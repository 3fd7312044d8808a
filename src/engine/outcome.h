// The result of work done on the engine thread for a caller waiting on
// another thread. An error travels as its message, kind and (PML) location,
// and is thrown again on the caller's thread as a new exception: an exception
// object shared by two threads through an exception_ptr is freed by whichever
// drops it last, under a reference count in the C++ runtime that
// ThreadSanitizer cannot see.
#pragma once
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "pml/pml.h"

namespace cs {

template <class T>
struct Outcome {
  std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
  std::string error;
  ErrorKind kind = ErrorKind::kOther;
  std::optional<pml::Location> pml_at;

  // Runs f, keeping its value or its error.
  template <class F>
  static Outcome of(F&& f) {
    try {
      Outcome o;
      if constexpr (std::is_void_v<T>) f();
      else o.value = f();
      return o;
    } catch (const pml::PmlError& e) {
      Outcome o = failed(e.what(), e.kind());
      o.pml_at = e.where();
      return o;
    } catch (const Error& e) {
      return failed(e.what(), e.kind());
    } catch (const std::exception& e) {
      return failed(e.what());
    }
  }
  static Outcome failed(const std::string& why, ErrorKind kind = ErrorKind::kOther) {
    Outcome o;
    o.error = why.empty() ? "an engine task failed" : why;
    o.kind = kind;
    return o;
  }
  // The value, or the error thrown (on the calling thread).
  T get() && {
    if (pml_at) throw pml::PmlError(*pml_at, error.substr(std::min(error.size(), pml_at->str().size() + 2)), kind);
    if (!error.empty()) throw Error(error, kind);
    if constexpr (!std::is_void_v<T>) return std::move(*value);
  }
};

}  // namespace cs
