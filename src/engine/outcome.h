// The result of work done on the engine thread for a caller waiting on
// another thread. An error travels as its Status (base/error.h: code,
// message, location) and is thrown again on the caller's thread as a
// cs::Error carrying it: an exception object shared by two threads through an
// exception_ptr is freed by whichever drops it last, under a reference count
// in the C++ runtime that ThreadSanitizer cannot see. No type is rebuilt from
// the message's text: a caller reads the status.
#pragma once
#include <exception>
#include <optional>
#include <string>
#include <type_traits>

#include "base/error.h"

namespace cs {

template <class T>
struct Outcome {
  std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
  std::optional<Status> error;

  // Runs f, keeping its value or its error.
  template <class F>
  static Outcome of(F&& f) {
    try {
      Outcome o;
      if constexpr (std::is_void_v<T>) f();
      else o.value = f();
      return o;
    } catch (const Error& e) {
      return failed(e.status());
    } catch (const std::exception& e) {
      return failed({ErrorKind::kInternal, e.what(), {}});
    }
  }
  static Outcome failed(Status why) {
    Outcome o;
    if (why.message.empty()) why.message = "an engine task failed";
    o.error = std::move(why);
    return o;
  }
  // The value, or the error thrown (on the calling thread).
  T get() && {
    if (error) throw Error(*error);
    if constexpr (!std::is_void_v<T>) return std::move(*value);
  }
};

}  // namespace cs
