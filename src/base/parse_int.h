// Whole-string integer parsing for outside input (query parameters, PML
// attributes): no trailing text, no overflow.
#pragma once
#include <optional>
#include <string>

namespace cs {

inline std::optional<long> parse_long(const std::string& s) {
  size_t used = 0;
  long n = 0;
  try {
    n = std::stol(s, &used);
  } catch (...) {
    return std::nullopt;
  }
  if (used != s.size()) return std::nullopt;
  return n;
}

}  // namespace cs
