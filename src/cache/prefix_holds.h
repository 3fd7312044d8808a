// Prefixes held in the tree for a while: what a cache_control breakpoint
// (Anthropic's Messages API) asks for. Each hold is a sequence of its own
// that joins the tree with the prefix's leading full chunks (those the tree
// holds now, nothing computed) and leaves when its time is up, so those
// chunks count as in use and no eviction takes them meanwhile. Holding the
// same prefix again (the same last chunk) extends its time: it is held, and
// counted, once. The chunks all holds keep (each counted once) stay within a
// bound; to make room for a new hold the oldest holds give way first.
// Engine-thread only, like the PrefixKv it holds in.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/prefix_kv.h"

namespace cs {

class PrefixHolds {
 public:
  using Clock = std::chrono::steady_clock;
  // max_chunks: the bound on the chunks held (0: no holds). Holds' sequences
  // are numbered from first_id up (apart from the engine's).
  PrefixHolds(PrefixKv& kv, int max_chunks, SeqId first_id = SeqId(1) << 62);
  ~PrefixHolds();  // every hold let go
  PrefixHolds(const PrefixHolds&) = delete;
  PrefixHolds& operator=(const PrefixHolds&) = delete;

  // Holds the leading full chunks of `tokens` the tree has until `until`
  // (or later, if already held longer). Returns the tokens held: 0 when the
  // tree has none of them, or they alone exceed the bound.
  int hold(std::span<const int32_t> tokens, Clock::time_point until);
  // Lets go of the holds whose time is up.
  void expire(Clock::time_point now);
  // Lets go of the oldest hold (a sequence needs its room); false: none.
  bool release_oldest();
  int holds() const { return int(holds_.size()); }
  int chunks() const { return int(refs_.size()); }  // distinct chunks held

 private:
  struct Hold {
    SeqId seq;
    std::vector<ChunkId> chunks;
    Clock::time_point until, since;
  };
  void release(ChunkId last);
  // Distinct chunks held if `chunks` were held too.
  int chunks_after(const std::vector<ChunkId>& chunks) const;
  PrefixKv& kv_;
  const int max_chunks_;
  SeqId next_;
  std::unordered_map<ChunkId, Hold> holds_;     // by the prefix's last chunk
  std::unordered_map<ChunkId, int> refs_;       // chunk -> holds keeping it
};

}  // namespace cs
