// Prefixes held in the tree (cache/prefix_holds.h).
#include "cache/prefix_holds.h"

#include <algorithm>

#include "kv/kv_status.h"

namespace cs {

PrefixHolds::PrefixHolds(PrefixKv& kv, int max_chunks, SeqId first_id)
    : kv_(kv), max_chunks_(max_chunks), next_(first_id) {}

PrefixHolds::~PrefixHolds() {
  while (!holds_.empty()) release(holds_.begin()->first);
}

void PrefixHolds::release(ChunkId last) {
  const auto it = holds_.find(last);
  for (ChunkId c : it->second.chunks)
    if (--refs_[c] == 0) refs_.erase(c);
  expect_ok(kv_.leave(it->second.seq), "letting go of a held prefix");
  holds_.erase(it);
}

int PrefixHolds::hold(std::span<const int32_t> tokens, Clock::time_point until) {
  const int c = kv_.chunk_size();
  const int full = int(tokens.size()) / c * c;
  if (full == 0 || max_chunks_ <= 0) return 0;
  // A sequence of the prefix's full chunks: what the tree holds of them is
  // shared (matched); the rest would need computing, so the hold is cut to
  // the matched chunks.
  const SeqId seq = next_++;
  int matched = 0;
  if (!kv_.join(seq, tokens.first(size_t(full)), &matched).ok()) return 0;
  const int have = matched / c * c;
  if (have < full) {
    expect_ok(kv_.leave(seq), "cutting a held prefix");
    if (have == 0) return 0;
    if (!kv_.join(seq, tokens.first(size_t(have)), &matched).ok() || matched != have) {
      expect_ok(kv_.leave(seq), "cutting a held prefix");
      return 0;
    }
  }
  std::vector<ChunkId> chunks = kv_.chunks_of(seq);
  chunks.resize(size_t(have / c));
  const ChunkId last = chunks.back();
  if (auto it = holds_.find(last); it != holds_.end()) {  // held already: once, for the longer time
    expect_ok(kv_.leave(seq), "holding a prefix again");
    it->second.until = std::max(it->second.until, until);
    it->second.since = Clock::now();
    return have;
  }
  if (int(chunks.size()) > max_chunks_) {
    expect_ok(kv_.leave(seq), "refusing a prefix over the bound");
    return 0;
  }
  // Room: the oldest holds give way (those sharing its chunks free less).
  while (chunks_after(chunks) > max_chunks_) release_oldest();
  for (ChunkId ch : chunks) ++refs_[ch];
  holds_.emplace(last, Hold{seq, std::move(chunks), until, Clock::now()});
  return have;
}

bool PrefixHolds::release_oldest() {
  if (holds_.empty()) return false;
  auto oldest = std::min_element(holds_.begin(), holds_.end(),
                                 [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
  release(oldest->first);
  return true;
}

int PrefixHolds::chunks_after(const std::vector<ChunkId>& chunks) const {
  int n = int(refs_.size());
  for (ChunkId ch : chunks) n += refs_.count(ch) ? 0 : 1;
  return n;
}

void PrefixHolds::expire(Clock::time_point now) {
  for (auto it = holds_.begin(); it != holds_.end();) {
    const ChunkId last = it->first;
    const bool due = it->second.until <= now;
    ++it;
    if (due) release(last);
  }
}

}  // namespace cs
