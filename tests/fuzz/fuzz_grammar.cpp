// libFuzzer: the constrained-decoding compiler (src/grammar): a JSON schema
// (checked by check_schema, then compiled), a regex, an EBNF grammar or a
// schema framed as tool calls, against the default model's vocabulary. The
// first byte picks the kind. A spec may be refused (GrammarError, with a
// message); nothing may crash, hang or leak, and what compiles gives a mask
// that allows some token or has ended.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_model.h"
#include "grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cs::GrammarVocab vocab(cs::fuzz::tokenizer());
  if (size == 0 || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  cs::GrammarSpec spec;
  switch (data[0] % 4) {
    case 0: spec = {cs::GrammarKind::kJsonSchema, text}; break;
    case 1: spec = {cs::GrammarKind::kRegex, text}; break;
    case 2: spec = {cs::GrammarKind::kEbnf, text}; break;
    default: spec = {cs::GrammarKind::kJsonSchema, text, cs::JsonFrame{"[", "<c>", "</c>", ",", "]", data[0] % 8 < 4 ? 1 : 0, {}}};
  }
  try {
    const auto g = cs::Grammar::compile(vocab, spec);
    cs::GrammarMatcher m(g);
    std::vector<uint32_t> bits(size_t(m.mask_words()));
    m.fill_mask(bits);
    bool any = false;
    for (uint32_t w : bits) any = any || w != 0;
    if (!any && !m.terminated()) std::abort();
  } catch (const cs::GrammarError& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
