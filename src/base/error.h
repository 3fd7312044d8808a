// Error type for failures the caller is expected to report, not to debug:
// a malformed file, a missing model, a prompt that does not fit.
// Messages name the offending input (file, key, tensor) and the problem; the
// kind says what happened, for callers that act on it (the server maps it to
// an HTTP status), so that no caller ever reads the message to decide.
#pragma once
#include <stdexcept>
#include <string>

namespace cs {

enum class ErrorKind {
  kOther,     // malformed input, a failed read, ...
  kNotFound,  // the named thing (a schema) does not exist
  kExists,    // one of that name exists (or is being made)
  kInUse,     // a request still uses it
  kNoRoom,    // the KV pool cannot hold it
  kStopped,   // the engine has stopped
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::kOther) : std::runtime_error(what), kind_(kind) {}
  explicit Error(const char* what, ErrorKind kind = ErrorKind::kOther) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace cs
