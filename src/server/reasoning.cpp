// A reply's thought apart from its answer (server/reasoning.h).
#include "server/reasoning.h"

namespace cs {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// How long a suffix of s could still grow into `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

bool template_thinks(const std::string& source) { return source.find(kOpen) != std::string::npos; }

bool template_has_channels(const std::string& source) { return source.find("<|channel|>") != std::string::npos; }

namespace {

constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>", kEnd = "<|end|>",
                           kStart = "<|start|>", kCall = "<|call|>";

// The split of a harmony reply's first `n` bytes: a segment is
// <|channel|>NAME<|message|>TEXT up to <|end|> or <|call|> (or the next
// <|start|> or <|channel|>, or the end); a channel's name is taken whole,
// and text that could still become a marker at the end is held (not
// `end`). A message to a recipient (a tool call: "to=functions.NAME" in its
// channel's header, or in its role's before <|channel|>, which a reply
// may open with) goes to the content as one block in the form
// server/tool_calls.h parses: <|channel|>commentary to=NAME<|message|>ARGS<|call|>.
SplitReply channels_of(std::string_view r, bool end) {
  SplitReply out;
  size_t at = 0;
  bool analysis = false, call = false, in_body = false;
  std::string_view role_to;  // the recipient of the message whose role header was read
  auto marker_at = [&](size_t i, std::string_view m) { return r.substr(i, m.size()) == m; };
  auto blank_from = [&](size_t i) {
    while (i < r.size() && blank(r[i])) ++i;
    return i;
  };
  while (at < r.size()) {
    if (!in_body) {
      // A reply that opens with its role's recipient (the prompt ended in
      // <|start|>assistant): " to=functions.NAME<|channel|>...". Until the
      // reply's start could be nothing else, it is held.
      const std::string_view lead = at == 0 ? r.substr(blank_from(0)) : std::string_view("-");
      if (!end && lead.size() < 3 && std::string_view("to=").starts_with(lead)) return out;
      if (lead.starts_with("to=")) {
        const size_t next = r.find(kChannel, at);
        if (next == std::string_view::npos) {
          if (end) out.content += r.substr(at);
          return out;
        }
        role_to = harmony_recipient(r.substr(at, next - at));
        at = next;
        continue;
      }
      if (marker_at(at, kChannel)) {  // a channel's header: its name up to <|message|>
        const size_t msg = r.find(kMessage, at + kChannel.size());
        if (msg == std::string_view::npos) return out;  // the header is not complete yet
        const std::string_view name = r.substr(at + kChannel.size(), msg - at - kChannel.size());
        std::string_view to = harmony_recipient(name);
        if (to.empty()) to = role_to;
        role_to = {};
        analysis = to.empty() && name.substr(0, 8) == "analysis";
        call = !to.empty();
        if (call) out.content += std::string(kChannel) + "commentary to=" + std::string(to) + std::string(kMessage);
        in_body = true;
        at = msg + kMessage.size();
        continue;
      }
      if (marker_at(at, kStart)) {  // <|start|>ROLE between messages
        const size_t next = r.find(kChannel, at);
        if (next == std::string_view::npos) return out;
        role_to = harmony_recipient(r.substr(at, next - at));
        at = next;
        continue;
      }
      if (marker_at(at, kEnd) || marker_at(at, kCall)) {
        at += marker_at(at, kEnd) ? kEnd.size() : kCall.size();
        continue;
      }
    }
    // Body text (or text outside any channel: the answer) up to the next marker.
    size_t stop = r.size();
    for (std::string_view m : {kEnd, kStart, kChannel, kCall}) stop = std::min(stop, r.find(m, at));
    std::string_view text = r.substr(at, stop - at);
    if (stop == r.size() && !end) {  // hold what could still become a marker
      size_t keep = 0;
      for (std::string_view m : {kEnd, kStart, kChannel, kCall})
        for (size_t k = std::min(text.size(), m.size() - 1); k > keep; --k)
          if (text.substr(text.size() - k) == m.substr(0, k)) {
            keep = k;
            break;
          }
      text.remove_suffix(keep);
    }
    (in_body && analysis ? out.reasoning : out.content) += text;
    // A call's block closes where its body does (or at the reply's end).
    if (in_body && call && (stop < r.size() || end)) out.content += kCall;
    if (stop == r.size()) return out;
    at = stop;
    if (marker_at(at, kEnd)) at += kEnd.size();
    else if (marker_at(at, kCall)) at += kCall.size();
    in_body = false;  // <|start|> or <|channel|>: a new message
    call = false;
  }
  return out;
}

}  // namespace

SplitReply split_channels(std::string_view reply) { return channels_of(reply, true); }

std::string_view harmony_recipient(std::string_view header) {
  const size_t to = header.find("to=");
  if (to == std::string_view::npos) return {};
  std::string_view name = header.substr(to + 3);
  return name.substr(0, std::min(name.find(' '), name.find('<')));
}

int effort_budget(std::string_view e) {
  if (e == "minimal") return 512;
  if (e == "low") return 1024;
  if (e == "medium") return 4096;
  if (e == "high") return 16384;
  if (e == "xhigh") return 32768;
  return -1;
}

bool opens_thought(std::string_view p) {
  size_t end = p.size();
  while (end > 0 && blank(p[end - 1])) --end;
  p = p.substr(0, end);
  return p.size() >= kOpen.size() && p.substr(p.size() - kOpen.size()) == kOpen;
}

SplitReply split_reasoning(std::string_view reply, bool in_thought) {
  ReasoningStream s(in_thought);
  SplitReply a = s.push(reply), b = s.flush();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

ReasoningStream::ReasoningStream(bool in_thought, bool channels)
    : state_(in_thought ? State::kThought : State::kStart), channels_(channels) {}

SplitReply ReasoningStream::push(std::string_view text) {
  if (channels_) {
    all_ += text;
    return take_channels(false);
  }
  held_ += text;
  return take(false);
}

SplitReply ReasoningStream::flush() { return channels_ ? take_channels(true) : take(true); }

// The split of everything so far, less what already went out (a prefix of it:
// the split only grows as the reply does, markers being held until whole).
SplitReply ReasoningStream::take_channels(bool end) {
  const SplitReply now = channels_of(all_, end);
  SplitReply out{now.reasoning.substr(std::min(shown_reasoning_, now.reasoning.size())),
                 now.content.substr(std::min(shown_content_, now.content.size()))};
  shown_reasoning_ = std::max(shown_reasoning_, now.reasoning.size());
  shown_content_ = std::max(shown_content_, now.content.size());
  return out;
}

SplitReply ReasoningStream::take(bool end) {
  SplitReply out;
  for (;;) {
    switch (state_) {
      case State::kStart: {  // blanks, then <think> opens a thought; anything else is the answer
        size_t i = 0;
        while (i < held_.size() && blank(held_[i])) ++i;
        const std::string_view rest = std::string_view(held_).substr(i);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, i + kOpen.size());
          state_ = State::kThought;
          continue;
        }
        if (!end && kOpen.substr(0, rest.size()) == rest) return out;  // may still become <think>
        state_ = State::kAnswer;
        continue;
      }
      case State::kThought: {
        const size_t at = held_.find(kClose);
        if (at != std::string::npos) {
          out.reasoning += held_.substr(0, at);
          held_.erase(0, at + kClose.size());
          state_ = State::kAfter;
          continue;
        }
        const size_t keep = end ? 0 : partial_tag(held_, kClose);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kAfter: {  // the newlines between the thought and the answer
        size_t i = 0;
        while (i < held_.size() && blank(held_[i])) ++i;
        held_.erase(0, i);
        if (held_.empty()) return out;
        state_ = State::kAnswer;
        continue;
      }
      case State::kAnswer:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

}  // namespace cs
