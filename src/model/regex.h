// Thin RAII wrapper over PCRE2 for the pre-tokenizer patterns (Unicode classes
// such as \p{L}, lookahead). Invalid UTF-8 never matches and is never an error.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace cs {

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws cs::Error on a bad pattern
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits `text` into the pieces the pattern matches and the gaps between
  // them, in order, as (offset, length) pairs that cover the text exactly.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace cs
