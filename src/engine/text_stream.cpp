#include "engine/text_stream.h"

#include <algorithm>
#include <utility>

#include "base/utf8.h"

namespace cs {
namespace {

// Length of the text that can be released without revealing the start of a
// stop string that may still complete.
size_t safe_length(const std::string& text, const std::vector<std::string>& stops) {
  size_t keep = text.size();
  for (const auto& s : stops) keep = std::min(keep, text.size() - begun_length(text, s));
  return keep;
}

}  // namespace

size_t begun_length(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop) : tok_(&tok) {
  for (auto& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

std::string TextStream::push(int32_t token, bool* stopped) {
  pending_ += tok_->piece(token);
  *stopped = false;
  size_t cut = std::string::npos;  // the earliest stop string wins (the first listed, at one place)
  for (const auto& s : stop_)
    if (const size_t at = pending_.find(s); at < cut) cut = at, matched_ = s;
  if (cut != std::string::npos) {
    pending_.resize(cut);
    *stopped = true;
    return std::exchange(pending_, {});
  }
  const size_t emit = std::min(safe_length(pending_, stop_), utf8_complete_prefix(pending_));
  std::string out = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string TextStream::flush() { return std::exchange(pending_, {}); }

}  // namespace cs
