// Thinking models' thought apart from their answer: templates whose markup
// has <think> (Qwen3, QwQ, DeepSeek-R1) let the model write
// <think>...</think> before the answer, or open the thought in the
// generation prompt themselves; gpt-oss's (the harmony format) has the model
// write channels, <|channel|>analysis<|message|>...<|end|> for the thought
// and <|channel|>final<|message|>... for the answer. The thought goes back as reasoning_content
// (Chat Completions), thinking blocks (Messages) and reasoning items
// (Responses); the answer after </think> (leading newlines dropped) is the
// content. Pure functions and a splitter for streams; docs/agent_apis.md.
#pragma once
#include <string>
#include <string_view>
#include <utility>

namespace cs {

// Whether a template's replies may hold a <think> section.
bool template_thinks(const std::string& template_source);
// Whether a template's replies are harmony channels (<|channel|>).
bool template_has_channels(const std::string& template_source);
// The close a budget forces (Request::think_end): the way the templates that
// think write a thought's end ("\n</think>\n\n"), as markup.
inline constexpr std::string_view kThoughtClose = "\n</think>\n\n";
// Harmony's: the analysis message ends and the final one begins (the next
// message's start, then the final channel's header).
inline constexpr std::string_view kChannelsOpen = "<|channel|>analysis<|message|>", kChannelsStop = "<|end|>",
                                  kChannelsClose = "<|end|><|start|>assistant<|channel|>final<|message|>",
                                  kChannelsNext = "<|start|>assistant", kChannelsFinal = "<|channel|>final<|message|>";
// A reasoning effort's budget of thought tokens (minimal 512, low 1024,
// medium 4096, high 16384, xhigh 32768); -1 for max (none) or another word.
int effort_budget(std::string_view effort);
// Whether a rendered prompt leaves the reply inside a thought (it ends with
// an open <think>, whitespace aside).
bool opens_thought(std::string_view prompt_text);

struct SplitReply {
  std::string reasoning, content;
};
// A whole reply: a thought (opened by the prompt, or by <think> at the
// reply's start) up to </think>, and the rest. A thought never closed is all
// reasoning.
SplitReply split_reasoning(std::string_view reply, bool in_thought);
// The recipient a harmony message header names ("to=functions.get_weather"
// in "commentary to=functions.get_weather <|constrain|>json", or in a role
// part "assistant to=functions.get_weather"): the name after "to=", up to a
// space or a marker; "" for none.
std::string_view harmony_recipient(std::string_view header);
// A harmony reply: the analysis channels' text is the thought, the others'
// (final, commentary) and text outside any channel the answer.
SplitReply split_channels(std::string_view reply);

// The same split as the reply streams in: each push returns the thought's
// and the answer's text that can go out now (a possible tag is held until
// it is or is not one); flush() the rest at the end. The pieces joined are
// split_reasoning's halves.
class ReasoningStream {
 public:
  explicit ReasoningStream(bool in_thought, bool channels = false);
  SplitReply push(std::string_view text);
  SplitReply flush();

 private:
  enum class State { kStart, kThought, kAfter, kAnswer } state_;
  std::string held_;
  SplitReply take(bool end);
  // Harmony: the whole reply so far, and how much of each half went out.
  bool channels_ = false;
  std::string all_;
  size_t shown_reasoning_ = 0, shown_content_ = 0;
  SplitReply take_channels(bool end);
};

}  // namespace cs
