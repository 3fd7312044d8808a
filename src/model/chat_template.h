// Chat templates: turn a conversation into the prompt text the model was
// tuned on, by rendering the model's own Jinja template
// (tokenizer.chat_template) the way Hugging Face's apply_chat_template does
// (jinja/template.h). A file without a template gets ChatML, with one warning
// line from the caller; `--chat-template FILE` replaces the file's template.
//
// The render keeps apart what the template wrote (markup) and what the
// conversation brought (content): only markup can produce special tokens, so
// a user who types "<|im_start|>system" gets those characters as text, not a
// forged turn, whichever way the template moves the text around.
//
// Immutable after construction; apply() may run on many threads at once.
#pragma once
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/template.h"
#include "model/tokenizer.h"

namespace cs {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

// What a render reads. messages: [{"role", "content", and whatever else the
// API carried: "tool_calls", "tool_call_id", "name", ...}]; tools: null or the
// request's tool list. Strings from here are content.
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: none
  bool add_generation_prompt = true;
  std::optional<std::time_t> now;  // strftime_now's clock (tests)
  // The request's chat_template_kwargs (e.g. enable_thinking): variables the
  // template reads (content, as everything from a request); the names above
  // are the renderer's own.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

// A rendered chat: runs of markup and content.
class ChatPrompt {
 public:
  void markup(std::string_view s) { add(s, true); }
  void content(std::string_view s) { add(s, false); }
  std::string text() const;                // everything, concatenated
  std::vector<TextPart> parts() const;     // views into this prompt, for Tokenizer::encode
  // Token ids. The BOS the vocabulary asks for is added when add_bos and the
  // template did not write one itself.
  std::vector<int32_t> encode(const Tokenizer& tok, bool add_bos) const;

 private:
  void add(std::string_view s, bool special);
  std::vector<std::pair<std::string, bool>> parts_;  // (text, is markup)
};

// The text around one message of a role, for PML's role blocks.
struct RoleText {
  std::string open, close;
};

class ChatTemplate {
 public:
  // The template of the model's vocabulary, `override_source` when not empty
  // (--chat-template), else a built-in one (is_fallback()): Gemma's turn
  // format when the vocabulary has <start_of_turn> and <end_of_turn>, else
  // ChatML. Throws
  // jinja::TemplateError when the template does not compile.
  static ChatTemplate for_model(const Tokenizer& tok, const std::string& override_source = "");
  // bos_added: the tokenizer adds BOS itself, so the role markers leave out
  // a BOS the template writes (PML adds its own).
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, bool bos_added = false);

  static const char* chatml_source();
  bool is_fallback() const { return fallback_; }
  // The Jinja text (tool calling reads which call format its markup uses).
  const std::string& source() const { return source_; }
  // Which built-in template a fallback is ("ChatML", ...; "" otherwise).
  const std::string& fallback_name() const { return fallback_name_; }

  // The prompt. Throws jinja::TemplateError when the template refuses the
  // conversation (raise_exception) or fails on it, or runs past
  // kRenderSteps steps or kRenderMillis ms (kLimit). A template without a
  // system role (system_role(): Gemma 2's raises on one) gets a leading
  // system message folded into the next message, "system\nnext", as
  // llama.cpp folds it; alone, it goes as the user's turn.
  ChatPrompt render(const ChatInput& in) const;
  static constexpr uint64_t kRenderSteps = 4'000'000;
  static constexpr int kRenderMillis = 2000;
  // At load (the constructor) a sample conversation must render within
  // these, or the template is refused (TemplateError, kLimit).
  static constexpr uint64_t kProbeSteps = 500'000;
  static constexpr int kProbeMillis = 500;
  ChatPrompt apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

  // The text before and after one message of `role` ("system", "user",
  // "assistant"), and where the assistant's reply begins, as the template
  // writes them in a conversation of system, user, assistant, user
  // (found by rendering one with marker texts as the messages). Templates that
  // fold the system message into the first user turn give the user's markers
  // to the system role.
  RoleText role_markers(const std::string& role) const;
  const std::string& reply_start() const { return reply_start_; }
  // Whether the template renders a system message (with the system and
  // user markers found, in order); false: it refuses one or drops its text.
  bool system_role() const { return system_role_; }

 private:
  void derive_markers();
  void probe() const;
  ChatPrompt render(const ChatInput& in, uint64_t max_steps, std::chrono::milliseconds max_time) const;

  std::shared_ptr<const jinja::Template> tmpl_;
  std::string source_;
  std::string bos_token_, eos_token_;
  bool bos_added_ = false;
  bool fallback_ = false;
  std::string fallback_name_;
  RoleText system_, user_, assistant_;
  std::string reply_start_;
  bool system_role_ = true;
};

}  // namespace cs
