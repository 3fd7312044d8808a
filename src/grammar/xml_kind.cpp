#include "grammar/xml_kind.h"

#include <algorithm>

namespace cs {

std::string xml_value_kind(const nlohmann::ordered_json& schema) {
  if (!schema.is_object()) return "";
  const auto strings = [](const nlohmann::ordered_json& v) {
    return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const nlohmann::ordered_json& x) { return x.is_string(); });
  };
  if (schema.contains("type") && schema["type"] == "string") {
    for (const char* k : {"enum", "const", "pattern", "format", "maxLength", "minLength"})
      if (schema.contains(k)) return "text";
    return "string";
  }
  if ((schema.contains("enum") && strings(schema["enum"])) || (schema.contains("const") && schema["const"].is_string()))
    return "text";
  return schema.contains("type") && schema["type"].is_string() ? schema["type"].get<std::string>() : "";
}

}  // namespace cs
