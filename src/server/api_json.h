// Reading and writing the agent APIs' bodies (server/messages_api.h,
// server/responses_api.h): the small helpers both mappings use.
#pragma once
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "server/api_error.h"

namespace cs::api {

using json = nlohmann::ordered_json;

inline ApiError invalid(const std::string& param, const std::string& message,
                        const std::string& code = "invalid_value") {
  return {400, message, "invalid_request_error", param, code};
}

// JSON text; bytes that are not UTF-8 (a reply cut inside a character) as U+FFFD.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A field, null counting as absent.
inline const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// An object's "type" string ("" when it has none).
inline std::string type_of(const json& item) {
  const json* t = item.is_object() ? field(item, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// A request body: refused before it is parsed when it nests too deep
// (base/json_depth.h), then it must be an object.
inline json parse_object(const std::string& body) {
  const int depth = json_nesting(body);
  if (depth > kMaxJsonNesting)
    throw invalid("", "the body nests " + std::to_string(depth) + " levels deep; at most " +
                          std::to_string(kMaxJsonNesting) + " are accepted",
                  "too_deeply_nested");
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw invalid("", "the body must be a JSON object", "invalid_json");
  return j;
}

// An id: the prefix and 24 random characters (hex, or letters and digits).
inline std::string random_id(const char* prefix, bool hex) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char digits[] = "0123456789abcdefABCDEFGHIJKLMNOPQRSTUVWXYZghijklmnopqrstuvwxyz";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += digits[rng() % (hex ? 16 : 62)];
  return id;
}

}  // namespace cs::api
