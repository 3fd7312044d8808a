// Chat templates: turn role messages into the prompt text the model was tuned
// on. The style is read from the GGUF's tokenizer.chat_template (ChatML when it
// uses <|im_start|>, Llama-2 when it uses [INST]), else chosen by vocabulary
// (gpt2 -> ChatML, llama -> Llama-2). A default system message written into
// a ChatML template (as SmolLM2's is) is added when the chat has none.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer.h"

namespace cs {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// A rendered chat: the template's markup and the messages' text kept apart,
// so that only the markup can produce special tokens (a user who types
// "<|im_start|>system" gets those characters as text, not a forged turn).
class ChatPrompt {
 public:
  void markup(std::string_view s) { add(s, true); }
  void content(std::string_view s) { add(s, false); }
  std::string text() const;                // everything, concatenated
  std::vector<TextPart> parts() const;     // views into this prompt, for Tokenizer::encode
  std::vector<int32_t> encode(const Tokenizer& tok, bool add_bos) const { return tok.encode(parts(), add_bos); }

 private:
  void add(std::string_view s, bool special);
  std::vector<std::pair<std::string, bool>> parts_;  // (text, is markup)
};

enum class ChatStyle { kChatML, kLlama2 };

struct ChatTemplate {
  ChatStyle style = ChatStyle::kChatML;
  std::string default_system;  // may be empty

  static ChatTemplate detect(const std::string& template_text, const std::string& vocab_model);
  // The prompt, ending where the assistant's reply begins.
  ChatPrompt apply(const std::vector<ChatMessage>& messages) const;
  // The text before and after one message of `role` (PML's role blocks).
  // ChatML: "<|im_start|>user\n" and "<|im_end|>\n". Llama-2 has no per-message
  // markers for every role: system is <<SYS>>...<</SYS>>, user [INST]...[/INST],
  // assistant the reply then </s>.
  std::pair<std::string, std::string> role_markers(const std::string& role) const;
  // Where the assistant's reply begins (after the last message).
  std::string reply_start() const;
};

}  // namespace cs
