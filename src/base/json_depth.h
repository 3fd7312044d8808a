// How deeply a JSON text nests, read without parsing it: every walk of a
// parsed value (ours, the grammar engine's, the templates', the destructor's)
// recurses once per level, so text from outside is measured first and text
// that nests too deeply is refused before anything walks it.
#pragma once
#include <string_view>

namespace cs {

// Requests (their bodies, and JSON inside their strings: schemas, tool
// arguments) nest at most this deep; docs: README, "Security".
inline constexpr int kMaxJsonNesting = 128;

// The most arrays and objects open at once (0 for a scalar). Brackets inside
// strings do not count. Text that is not JSON gives some number and is left
// to the parser to refuse.
inline int json_nesting(std::string_view text) {
  int depth = 0, most = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most) most = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return most;
}

}  // namespace cs
