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

ReasoningStream::ReasoningStream(bool in_thought) : state_(in_thought ? State::kThought : State::kStart) {}

SplitReply ReasoningStream::push(std::string_view text) {
  held_ += text;
  return take(false);
}

SplitReply ReasoningStream::flush() { return take(true); }

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
