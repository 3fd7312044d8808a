// An error answered the OpenAI way: an HTTP status and
// {"error": {"message", "type", "param", "code"}}.
#pragma once
#include <string>

#include "base/error.h"

namespace cs {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// The error object as JSON text.
std::string error_json(const ApiError& e);

// The error with `from` replaced by `to` in its param and message: another
// API's name for a field of the chat request it was parsed as (the Messages
// API's "].input_schema" for "].function.parameters").
ApiError renamed(ApiError e, const std::string& from, const std::string& to);

// The route's answer to an engine's status, by its generic code: not found
// 404, exists or in use 409 (codes `<thing>_not_found`, `_exists`,
// `_in_use`: the route names what it is about), stopped 503, internal 500,
// no room and invalid 400 (code `invalid`, null when empty). The message
// carries the status's location (a PML document's "file:line:column").
ApiError api_error_of(const Status& s, const std::string& param = "", const std::string& thing = "schema",
                      const std::string& invalid = "");

}  // namespace cs
