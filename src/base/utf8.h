// Minimal UTF-8 helpers (tokenizer, text streaming, templates). Invalid bytes are single units.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace cs {

// Length of the UTF-8 sequence at s[p] (1 for an invalid or truncated one).
inline size_t utf8_len(std::string_view s, size_t p) {
  const auto c = static_cast<unsigned char>(s[p]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (p + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[p + k]) & 0xc0) != 0x80) return 1;
  return n;
}

// Code point of the n-byte sequence at s[p] (the byte itself when n == 1).
inline uint32_t utf8_decode(std::string_view s, size_t p, size_t n) {
  const auto c = static_cast<unsigned char>(s[p]);
  if (n == 1) return c;
  uint32_t cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[p + k]) & 0x3f);
  return cp;
}

inline std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
  return out;
}

// Length of the longest prefix of s that ends on a complete UTF-8 character
// (so streamed output never splits one); invalid bytes count as complete.
inline size_t utf8_complete_prefix(std::string_view s) {
  size_t k = s.size();
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (need > back) k = s.size() - back;
    break;
  }
  return k;
}

}  // namespace cs
