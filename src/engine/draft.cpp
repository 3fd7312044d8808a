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

std::vector<int32_t> lookup_draft(std::span<const int32_t> corpus, std::span<const int32_t> text, int k,
                                  int min_n, int max_n, int near) {
  if (k <= 0) return {};
  const int len = int(corpus.size());
  for (int n = std::min<int>(max_n, int(text.size())); n >= std::max(1, min_n); --n) {
    const std::span<const int32_t> tail = text.last(size_t(n));
    // With something after it; the latest (text usually goes on as it did
    // most recently), or the nearest to where the output has reached.
    int best = -1;
    for (int at = len - n - 1; at >= 0; --at) {
      if (!std::equal(tail.begin(), tail.end(), corpus.begin() + at)) continue;
      if (near < 0) {
        best = at;
        break;
      }
      if (best < 0 || std::abs(at + n - near) < std::abs(best + n - near)) best = at;
    }
    if (best < 0) continue;
    const int from = best + n, take = std::min(k, len - from);
    return {corpus.begin() + from, corpus.begin() + from + take};
  }
  return {};
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
