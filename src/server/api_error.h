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

// An engine's refusal by its kind: not found 404, exists or in use 409,
// stopped 503, no room and the rest 400.
ApiError api_error_of(const Error& e, const std::string& param = "");

}  // namespace cs
