// Turns a completion's tokens into the text a client may see: whole UTF-8
// characters only, and never any part of a stop string (text that might still
// become one is held back until it cannot). One per completion.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace cs {

// Length of the longest proper prefix of `marker` that `text` ends with (0:
// none): the text that may still become the marker.
size_t begun_length(std::string_view text, std::string_view marker);

class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop);

  // Adds a token's text; returns what can be released now. When a stop string
  // completes, the text before it is released, *stopped is set and the rest
  // is dropped.
  std::string push(int32_t token, bool* stopped);
  // At the end (not after a stop): the text held back.
  std::string flush();
  // The stop string that ended the text (empty: none did).
  const std::string& matched() const { return matched_; }

 private:
  const Tokenizer* tok_;
  std::vector<std::string> stop_;
  std::string pending_;
  std::string matched_;
};

}  // namespace cs
