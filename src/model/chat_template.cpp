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

ChatPrompt ChatTemplate::apply(const std::vector<ChatMessage>& messages) const {
  ChatPrompt out;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (style == ChatStyle::kChatML) {
    if (!has_system && !default_system.empty()) out.markup("<|im_start|>system\n" + default_system + "<|im_end|>\n");
    for (const auto& m : messages) {
      out.markup("<|im_start|>" + m.role + "\n");
      out.content(m.content);
      out.markup("<|im_end|>\n");
    }
    out.markup("<|im_start|>assistant\n");
    return out;
  }
  // Llama-2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {reply} </s>
  const std::string system = has_system ? messages[0].content : "";
  bool first_user = true;
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "assistant") {
      out.markup(" ");
      out.content(m.content);
      out.markup(" </s>");
      continue;
    }
    out.markup("<s>[INST] ");
    if (first_user && !system.empty()) {
      out.markup("<<SYS>>\n");
      out.content(system);
      out.markup("\n<</SYS>>\n\n");
    }
    first_user = false;
    out.content(m.content);
    out.markup(" [/INST]");
  }
  return out;
}

void ChatPrompt::add(std::string_view s, bool special) {
  if (s.empty()) return;
  if (!parts_.empty() && parts_.back().second == special)
    parts_.back().first += s;
  else
    parts_.emplace_back(std::string(s), special);
}

std::string ChatPrompt::text() const {
  std::string out;
  for (const auto& [t, special] : parts_) out += t;
  return out;
}

std::vector<TextPart> ChatPrompt::parts() const {
  std::vector<TextPart> out;
  out.reserve(parts_.size());
  for (const auto& [t, special] : parts_) out.push_back({t, special});
  return out;
}

}  // namespace cs
