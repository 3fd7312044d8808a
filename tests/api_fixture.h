// What the API mapping tests share: the GPT-2 test vocabulary (its text
// round-trips byte for byte) and request limits over a chat template.
#pragma once
#include <string>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "server/api_request.h"
#include "server/tool_calls.h"

namespace cs::test {

inline const Tokenizer& gpt2_tokenizer() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile(std::string(CS_VOCAB_DIR) + "/ggml-vocab-gpt-2.gguf"));
  return t;
}

// Model "m", a 4096-token context, n up to 4, the template's tool syntax
// (none without a template).
inline ApiLimits api_limits(const ChatTemplate* chat) {
  return {&gpt2_tokenizer(), chat, std::string("m"), 4096, 4, chat ? tool_syntax(chat->source()) : ToolSyntax{}, nullptr,
          ToolSyntax{}};
}

}  // namespace cs::test
