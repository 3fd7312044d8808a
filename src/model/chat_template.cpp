#include "model/chat_template.h"

namespace cs {

ChatTemplate ChatTemplate::detect(const std::string& text, const std::string& vocab_model) {
  ChatTemplate t;
  if (text.find("<|im_start|>") != std::string::npos) {
    t.style = ChatStyle::kChatML;
    const std::string open = "<|im_start|>system\n";
    const size_t b = text.find(open);
    const size_t e = b == std::string::npos ? b : text.find("<|im_end|>", b);
    // Only a literal system turn (no template expression inside) is a default.
    if (e != std::string::npos) {
      std::string sys = text.substr(b + open.size(), e - b - open.size());
      if (sys.find('{') == std::string::npos && sys.find('\'') == std::string::npos)
        t.default_system = sys;
    }
  } else if (text.find("[INST]") != std::string::npos || (text.empty() && vocab_model == "llama")) {
    t.style = ChatStyle::kLlama2;
  }
  return t;
}

std::pair<std::string, std::string> ChatTemplate::role_markers(const std::string& role) const {
  if (style == ChatStyle::kChatML) return {"<|im_start|>" + role + "\n", "<|im_end|>\n"};
  if (role == "system") return {"<s>[INST] <<SYS>>\n", "\n<</SYS>>\n\n"};
  if (role == "user") return {"[INST] ", " [/INST]"};
  return {" ", " </s>"};
}

std::string ChatTemplate::reply_start() const { return style == ChatStyle::kChatML ? "<|im_start|>assistant\n" : ""; }

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages) const {
  std::string out;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (style == ChatStyle::kChatML) {
    if (!has_system && !default_system.empty())
      out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
    for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    return out + "<|im_start|>assistant\n";
  }
  // Llama-2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s>
  std::string system = has_system ? messages[0].content : "";
  bool first_user = true;
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "assistant") {
      out += " " + m.content + " </s>";
      continue;
    }
    out += "<s>[INST] ";
    if (first_user && !system.empty()) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
    first_user = false;
    out += m.content + " [/INST]";
  }
  return out;
}

}  // namespace cs
