// An error answered the OpenAI way: an HTTP status and
// {"error": {"message", "type", "param", "code"}}.
#pragma once
#include <string>

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

}  // namespace cs
