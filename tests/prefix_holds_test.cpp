// Held prefixes (cache/prefix_holds.h) over a PrefixKv with no model: a
// held prefix survives eviction until its time is up, is held once however
// often asked, only what the tree holds is held, and the bound lets the
// oldest holds go first.
#include "cache/prefix_holds.h"

#include <gtest/gtest.h>

#include <vector>

namespace cs {
namespace {

const KvLayout kLayout{1, 1, 64, 64, KvType::kF32};
using Clock = PrefixHolds::Clock;

// A request's sequence: it shares what the tree has of `tokens`, runs the
// rest (their K/V zeros) and leaves: the tree retains them.
void cache(PrefixKv& kv, SeqId id, const std::vector<int32_t>& tokens) {
  int matched = 0;
  ASSERT_TRUE(kv.join(id, tokens, &matched).ok());
  Batch b;
  for (int i = matched; i < int(tokens.size()); ++i) b.add(tokens[size_t(i)], i, int32_t(id), i + 1 == int(tokens.size()));
  if (b.size() > 0) {
    kv.begin_batch(b);
    std::vector<float> zeros(size_t(b.size()) * 64, 0.0f);
    kv.store(0, zeros.data(), zeros.data());
  }
  ASSERT_TRUE(kv.leave(id).ok());
}

std::vector<int32_t> tokens(int first, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

int matched(PrefixKv& kv, SeqId id, const std::vector<int32_t>& t) {
  int m = 0;
  EXPECT_TRUE(kv.join(id, t, &m).ok());
  EXPECT_TRUE(kv.leave(id).ok());
  return m;
}

TEST(PrefixHolds, AHeldPrefixOutlivesEvictionUntilItsTimeIsUp) {
  PrefixKv kv(kLayout, 16 * kLayout.chunk_bytes(), 1);
  PrefixHolds holds(kv, 8);
  const auto a = tokens(1000, 200);  // 3 full chunks and 8 tokens
  cache(kv, 1, a);
  const auto now = Clock::now();
  EXPECT_EQ(holds.hold(a, now + std::chrono::seconds(10)), 192);  // full chunks only
  EXPECT_EQ(holds.hold(a, now + std::chrono::seconds(5)), 192);   // once: the longer time stands
  EXPECT_EQ(holds.holds(), 1);
  EXPECT_EQ(holds.chunks(), 3);
  kv.flush();  // evicts every retained chunk but the held ones
  EXPECT_EQ(matched(kv, 2, a), 192);
  holds.expire(now + std::chrono::seconds(9));
  EXPECT_EQ(holds.holds(), 1);
  holds.expire(now + std::chrono::seconds(10));
  EXPECT_EQ(holds.holds(), 0);
  EXPECT_EQ(holds.chunks(), 0);
  kv.flush();
  EXPECT_EQ(matched(kv, 3, a), 0);
}

TEST(PrefixHolds, OnlyWhatTheTreeHoldsIsHeldAndTheOldestGiveWay) {
  PrefixKv kv(kLayout, 16 * kLayout.chunk_bytes(), 1);
  PrefixHolds holds(kv, 5);
  const auto until = Clock::now() + std::chrono::hours(1);
  EXPECT_EQ(holds.hold(tokens(1, 128), until), 0);  // nothing cached: nothing held (nothing computed)
  const auto a = tokens(1000, 192), b = tokens(2000, 128), c = tokens(3000, 384);
  cache(kv, 1, a);
  cache(kv, 2, b);
  auto a_longer = a;
  for (int32_t t : tokens(5000, 128)) a_longer.push_back(t);
  EXPECT_EQ(holds.hold(a_longer, until), 192);  // cut to the cached part
  EXPECT_EQ(holds.hold(b, until), 128);
  EXPECT_EQ(holds.chunks(), 5);
  // A shorter prefix of a held one adds no chunk: within the bound.
  EXPECT_EQ(holds.hold(tokens(1000, 64), until), 64);
  EXPECT_EQ(holds.holds(), 3);
  EXPECT_EQ(holds.chunks(), 5);
  // One more chunk: the oldest hold (a's) gives way; a's first chunk stays
  // held by the shorter prefix.
  auto b_longer = b;
  for (int32_t t : tokens(6000, 64)) b_longer.push_back(t);
  cache(kv, 3, b_longer);
  EXPECT_EQ(holds.hold(b_longer, until), 192);
  EXPECT_EQ(holds.holds(), 3);
  EXPECT_EQ(holds.chunks(), 4);
  // Alone over the bound: refused, nothing let go.
  cache(kv, 4, c);
  EXPECT_EQ(holds.hold(c, until), 0);
  EXPECT_EQ(holds.holds(), 3);
  // A sequence needs room: the oldest hold goes, b's (its chunks stay held
  // by b_longer's).
  EXPECT_TRUE(holds.release_oldest());
  EXPECT_EQ(holds.holds(), 2);
  EXPECT_EQ(holds.chunks(), 4);
  kv.flush();
  EXPECT_EQ(matched(kv, 5, a), 64);
  EXPECT_EQ(matched(kv, 6, b_longer), 192);
  EXPECT_EQ(matched(kv, 7, c), 0);
}

}  // namespace
}  // namespace cs
