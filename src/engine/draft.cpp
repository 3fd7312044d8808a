#include "engine/draft.h"

#include <algorithm>
#include <cstdlib>

namespace cs {

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::kPrediction: return "prediction";
    case DraftSource::kTree: return "tree";
    case DraftSource::kContext: return "context";
    case DraftSource::kNone: break;
  }
  return "none";
}

namespace {

// The draft the occurrences' continuations agree on: token by token, the one
// most of the occurrences still in the running go on with (a tie: the one
// the latest of them has), the others dropping out. `from`: where each
// occurrence's continuation starts, latest first.
std::vector<int32_t> agreed_continuation(std::span<const int32_t> corpus, std::vector<int> from, int k) {
  std::vector<int32_t> out;
  std::vector<std::pair<int32_t, int>> votes;  // token, occurrences; in order of first vote (latest first)
  const int len = int(corpus.size());
  while (int(out.size()) < k) {
    const int j = int(out.size());
    votes.clear();
    for (int f : from) {
      if (f + j >= len) continue;
      const int32_t t = corpus[size_t(f + j)];
      auto it = std::find_if(votes.begin(), votes.end(), [t](const auto& v) { return v.first == t; });
      if (it == votes.end()) votes.push_back({t, 1});
      else ++it->second;
    }
    if (votes.empty()) break;
    const int32_t pick = std::max_element(votes.begin(), votes.end(), [](const auto& x, const auto& y) {
                           return x.second < y.second;  // the first of the most: the latest occurrence's
                         })->first;
    std::erase_if(from, [&](int f) { return f + j >= len || corpus[size_t(f + j)] != pick; });
    out.push_back(pick);
  }
  return out;
}

}  // namespace

std::vector<int32_t> lookup_draft(std::span<const int32_t> corpus, std::span<const int32_t> text, int k,
                                  int min_n, int max_n, int near) {
  if (k <= 0) return {};
  const int len = int(corpus.size());
  std::vector<int> from;
  for (int n = std::min<int>(max_n, int(text.size())); n >= std::max(1, min_n); --n) {
    const std::span<const int32_t> tail = text.last(size_t(n));
    // Every occurrence with something after it, latest first.
    from.clear();
    for (int at = len - n - 1; at >= 0; --at)
      if (std::equal(tail.begin(), tail.end(), corpus.begin() + at)) from.push_back(at + n);
    if (from.empty()) continue;
    if (near >= 0) {
      // A prediction: the continuation that starts nearest where the output
      // has reached in it (the latest of two as near).
      int best = from[0];
      for (int f : from)
        if (std::abs(f - near) < std::abs(best - near)) best = f;
      const int take = std::min(k, len - best);
      return {corpus.begin() + best, corpus.begin() + best + take};
    }
    return agreed_continuation(corpus, std::move(from), k);
  }
  return {};
}

size_t ContextIndex::bucket(int32_t a, int32_t b, size_t mask) {
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  return size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

void ContextIndex::insert(std::span<const int32_t> tokens, int p) {
  int& head = head_[bucket(tokens[size_t(p)], tokens[size_t(p) + 1], head_.size() - 1)];
  prev_[size_t(p)] = head;
  head = p;
}

void ContextIndex::sync(std::span<const int32_t> tokens) {
  const int grams = std::max(0, int(tokens.size()) - 1);
  if (grams < indexed_) indexed_ = 0, head_.clear();  // not a continuation of what was indexed
  prev_.resize(size_t(grams));
  if (head_.size() < 2 * size_t(grams) + 16) {
    // Buckets at least twice the 2-grams: rebuilt as the text doubles.
    size_t n = 64;
    while (n < 4 * size_t(grams)) n *= 2;
    head_.assign(n, -1);
    indexed_ = 0;
  }
  for (; indexed_ < grams; ++indexed_) insert(tokens, indexed_);
}

std::vector<int32_t> ContextIndex::draft(std::span<const int32_t> tokens, int k, int max_n) const {
  const int len = int(tokens.size());
  if (k <= 0 || len < 3 || max_n < 2 || head_.empty() || indexed_ < len - 1) return {};
  const int32_t a = tokens[size_t(len - 2)], b = tokens[size_t(len - 1)];
  // Each occurrence with something after it (start <= len - 3), latest
  // first, and how many of the text's last tokens it matches (2..max_n).
  std::vector<std::pair<int, int>> found;
  int most = 0;
  for (int p = head_[bucket(a, b, head_.size() - 1)]; p >= 0 && int(found.size()) < kMaxOccurrences;
       p = prev_[size_t(p)]) {
    if (p > len - 3 || tokens[size_t(p)] != a || tokens[size_t(p) + 1] != b) continue;
    int n = 2;
    while (n < max_n && p - (n - 1) >= 0 && tokens[size_t(p - (n - 1))] == tokens[size_t(len - 1 - n)]) ++n;
    found.push_back({p + 2, n});
    most = std::max(most, n);
  }
  std::vector<int> from;
  for (const auto& [f, n] : found)
    if (n == most) from.push_back(f);
  return from.empty() ? std::vector<int32_t>{} : agreed_continuation(tokens, std::move(from), k);
}

int DraftPacer::best_length(double p) {
  p = std::clamp(p, 0.0, 0.995);
  int best = 1;
  double best_rate = 0.0, pk = p;  // pk = p^(k+1)
  for (int k = 1; k <= kMaxDraft; ++k) {
    pk *= p;
    const double rate = (1.0 - pk) / (1.0 - p) / (1.0 + kRowCost * k);
    if (rate > best_rate) best_rate = rate, best = k;
  }
  return best;
}

int DraftPacer::next() {
  if (rest_ > 0) {
    --rest_;
    return 0;
  }
  return best_length(p_);
}

void DraftPacer::taken(int drafted, int accepted) {
  if (drafted <= 0) return;
  const double seen = accepted + (accepted < drafted ? 1 : 0);
  p_ = (1.0 - kRecent) * p_ + kRecent * (accepted / seen);
  if (accepted > 0) {
    misses_ = 0;
    return;
  }
  if (++misses_ >= kMissesToRest) rest_ = 1 << std::min(misses_ - kMissesToRest, 6);
}

}  // namespace cs
