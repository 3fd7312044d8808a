// libFuzzer: the tokenizer's encode on arbitrary bytes (the default model's
// vocabulary). Without special-token parsing, decode(encode(x)) must give x
// back byte for byte, but for bytes the vocabulary cannot spell (U+FFFD);
// any input must encode to ids in the vocabulary without a crash.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_model.h"

namespace {

// The text decode(encode(text)) must give: each byte the vocabulary cannot
// spell replaced by U+FFFD.
std::string expected(const cs::Tokenizer& tok, const std::string& text) {
  std::string out;
  for (char c : text) out += tok.has_byte(static_cast<uint8_t>(c)) ? std::string(1, c) : "\xEF\xBF\xBD";
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cs::Tokenizer& tok = cs::fuzz::tokenizer();
  if (size == 0) return 0;
  const bool special = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::vector<int32_t> ids = tok.encode(text, special, false);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  if (!special && tok.decode(ids) != expected(tok, text)) std::abort();
  return 0;
}
