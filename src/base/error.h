// Error type for failures the caller is expected to report, not to debug:
// a malformed file, a missing model, a prompt that does not fit.
// Messages name the offending input (file, key, tensor) and the problem; the
// kind says what happened, for callers that act on it, so that no caller ever
// reads the message to decide.
//
// Across the engine's boundary (engine/outcome.h) an error travels as its
// Status: a generic code, the message, and where (a PML document's
// "file:line:column"; empty elsewhere). Each server route picks its API's
// code from the generic one (server/api_error.h).
#pragma once
#include <stdexcept>
#include <string>

namespace cs {

enum class ErrorKind {
  kInvalid,   // malformed input, a failed read, ...
  kNotFound,  // the named thing (a schema) does not exist
  kExists,    // one of that name exists (or is being made)
  kInUse,     // a request still uses it
  kNoRoom,    // the KV pool (or a device's memory) cannot hold it
  kStopped,   // the engine has stopped
  kInternal,  // none of the above: a fault of ours or of the machine
};

struct Status {
  ErrorKind code = ErrorKind::kInvalid;
  std::string message;   // the problem, without the location
  std::string location;  // "file:line:column" in a PML document; empty: none
  // "location: message", or the message alone.
  std::string text() const { return location.empty() ? message : location + ": " + message; }
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::kInvalid)
      : std::runtime_error(what), status_{kind, what, {}} {}
  explicit Error(const char* what, ErrorKind kind = ErrorKind::kInvalid)
      : std::runtime_error(what), status_{kind, what, {}} {}
  explicit Error(Status s) : std::runtime_error(s.text()), status_(std::move(s)) {}
  ErrorKind kind() const { return status_.code; }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace cs
