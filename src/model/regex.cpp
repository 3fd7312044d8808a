#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/regex.h"

#include <pcre2.h>

#include "base/error.h"

namespace cs {

Regex::Regex(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE at = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error("bad pre-tokenizer pattern at " + std::to_string(at) + ": " +
                reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional speed-up; fine if unavailable
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: step over one byte and keep looking
      pos = b + 1;
      continue;
    }
    if (b > gap) out.emplace_back(gap, b - gap);
    out.emplace_back(b, e - b);
    pos = gap = e;
  }
  if (gap < text.size()) out.emplace_back(gap, text.size() - gap);
  pcre2_match_data_free(md);
  return out;
}

}  // namespace cs
