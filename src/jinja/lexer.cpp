#include "jinja/lexer.h"

#include <cstring>

#include "base/utf8.h"
#include "jinja/error.h"

namespace cs::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalise(std::string_view src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += src[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    bool strip_next = false;  // the previous tag ended with "-"
    while (pos_ <= s_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = s_.substr(pos_, tag - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
      }
      if (tag == s_.size()) {
        emit_text(text, pos_);
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char lmod = tag + 2 < s_.size() ? s_[tag + 2] : 0;
      if (lmod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (lmod != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(text, pos_);
      line_ = line_at(tag);
      pos_ = tag + 2 + ((lmod == '-' || lmod == '+') ? 1 : 0);
      char rmod = 0;
      if (kind == '#')
        rmod = comment();
      else
        rmod = tag_body(kind);
      // After the tag: "-" eats whitespace; trim_blocks eats one newline.
      strip_next = rmod == '-';
      line_starting = false;
      if (!strip_next && rmod != '+' && kind != '{' && pos_ < s_.size() && s_[pos_] == '\n') {
        ++pos_;
        line_starting = true;
      }
      if (strip_next) {
        size_t k = pos_;
        while (k < s_.size() && is_space(s_[k])) ++k;
        line_starting = k > pos_ && s_[k - 1] == '\n';
      }
      if (raw_pending_) {
        raw_block(strip_next);
        strip_next = line_starting = false;
      }
    }
    out_.push_back({Tok::kEof, "", line_at(s_.size())});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  int line_at(size_t at) {
    for (; counted_ < at && counted_ < s_.size(); ++counted_)
      if (s_[counted_] == '\n') ++counted_line_;
    return counted_line_;
  }

  void emit_text(const std::string& text, size_t at) {
    if (!text.empty()) out_.push_back({Tok::kText, text, line_at(at)});
  }

  [[noreturn]] void fail(const std::string& what) { throw TemplateError(TemplateErrorKind::kSyntax, line_, what); }

  char comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail("a comment ({# ... #}) is never closed");
    const char rmod = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    pos_ = end + 2;
    return rmod;
  }

  // The tokens of a {{ }} or {% %} tag; returns its right modifier.
  char tag_body(char kind) {
    const char close = kind == '{' ? '}' : '%';
    out_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
    const size_t first = out_.size();
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) fail(std::string("a tag opened with {") + (kind == '{' ? '{' : '%') + " is never closed");
      const int here = line_at(pos_);
      char rmod = 0;
      size_t end = pos_;
      if ((s_[pos_] == '-' || s_[pos_] == '+') && pos_ + 1 < s_.size() && s_[pos_ + 1] == close) {
        rmod = s_[pos_];
        end = pos_ + 1;
      }
      if (end + 1 < s_.size() && s_[end] == close && s_[end + 1] == '}') {
        pos_ = end + 2;
        out_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", here});
        if (kind == '%' && out_.size() == first + 2 && out_[first].kind == Tok::kName && out_[first].text == "raw") {
          out_.resize(first - 1);
          raw_pending_ = true;
        }
        return rmod;
      }
      token(here);
    }
  }

  void token(int line) {
    const char c = s_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = pos_;
      while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
      out_.push_back({Tok::kName, s_.substr(pos_, e - pos_), line});
      pos_ = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      number(line);
    } else if (c == '\'' || c == '"') {
      string(line);
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                   "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|"};
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (s_.compare(pos_, n, op) == 0) {
          out_.push_back({Tok::kOp, op, line});
          pos_ += n;
          return;
        }
      }
      fail(std::string("unexpected character '") + c + "'");
    }
  }

  void number(int line) {
    size_t e = pos_;
    auto digits = [&] {
      while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        e = k;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (s_[k] != '_') text += s_[k];
    out_.push_back({is_float ? Tok::kFloat : Tok::kInt, text, line});
    pos_ = e;
  }

  void string(int line) {
    const char q = s_[pos_++];
    std::string v;
    for (;;) {
      if (pos_ >= s_.size()) fail("a string literal is never closed");
      const char c = s_[pos_++];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("a string literal is never closed");
      const char e = s_[pos_++];
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case 'a': v += '\a'; break;
        case '0': v += '\0'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > s_.size()) fail("a bad escape in a string literal");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = s_[pos_ + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("a bad escape in a string literal");
            cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          pos_ += n;
          v += utf8_encode(cp);
          break;
        }
        default: v += '\\'; v += e;  // Python keeps unknown escapes
      }
    }
    out_.push_back({Tok::kString, v, line});
  }

  // After {% raw %}: everything up to {% endraw %} is text.
  void raw_block(bool strip_first) {
    raw_pending_ = false;
    size_t at = pos_;
    for (;;) {
      const size_t tag = s_.find("{%", at);
      if (tag == std::string::npos) fail("{% raw %} is never closed by {% endraw %}");
      size_t k = tag + 2;
      const char lmod = k < s_.size() && (s_[k] == '-' || s_[k] == '+') ? s_[k++] : 0;
      while (k < s_.size() && is_space(s_[k])) ++k;
      if (s_.compare(k, 6, "endraw") != 0) {
        at = tag + 2;
        continue;
      }
      k += 6;
      while (k < s_.size() && is_space(s_[k])) ++k;
      const char rmod = k < s_.size() && (s_[k] == '-' || s_[k] == '+') ? s_[k++] : 0;
      if (s_.compare(k, 2, "%}") != 0) fail("{% endraw %} is malformed");
      std::string text = s_.substr(pos_, tag - pos_);
      if (strip_first) {
        size_t n = 0;
        while (n < text.size() && is_space(text[n])) ++n;
        text.erase(0, n);
      }
      if (lmod == '-')
        while (!text.empty() && is_space(text.back())) text.pop_back();
      emit_text(text, pos_);
      pos_ = k + 2;
      if (rmod == '-')
        while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      else if (rmod != '+' && pos_ < s_.size() && s_[pos_] == '\n')
        ++pos_;
      return;
    }
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t counted_ = 0;
  int counted_line_ = 1;
  bool raw_pending_ = false;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalise(source)).run(); }

}  // namespace cs::jinja
