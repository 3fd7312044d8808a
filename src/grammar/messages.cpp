#include "grammar/messages.h"

#include <algorithm>
#include <cctype>

namespace cs {

// The engine's message without what is only for its developers: its log
// prefix ("[12:00:00] path/file.cc:123: ") and an internal check's
// "Check failed: (...) is false: ".
std::string client_message(std::string m) {
  if (!m.empty() && m[0] == '[') {
    const size_t e = m.find("] ");
    if (e != std::string::npos) m.erase(0, e + 2);
  }
  const size_t colon = m.find(": ");
  if (colon != std::string::npos && m.find(' ') > colon && m.rfind(':', colon - 1) != std::string::npos) {
    const size_t line = m.rfind(':', colon - 1);
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (line + 1 < colon && std::all_of(m.begin() + long(line) + 1, m.begin() + long(colon), digit))
      m.erase(0, colon + 2);
  }
  if (m.rfind("Check failed: ", 0) == 0) {
    const size_t e = m.find(" is false: ");
    if (e != std::string::npos) m.erase(0, e + 11);
  }
  while (!m.empty() && std::isspace(static_cast<unsigned char>(m.back()))) m.pop_back();
  return m;
}

}  // namespace cs
