// PrefixKv alone, with no model: the K/V a batch stores are where its
// sequences read them, attention sees them, a retained prefix (a partial
// chunk copied) and a fork read the same bytes, and a batch it cannot take
// changes nothing.
#include "cache/prefix_kv.h"

#include <gtest/gtest.h>

#include <vector>

namespace cs {
namespace {

const KvLayout kLayout{1, 1, 64, 64, KvType::kF32};

// Token i's K: i + x / 100 in dimension x; its V: the negation.
float key(int i, int x) { return float(i) + float(x) / 100.0f; }

void run_prompt(PrefixKv& kv, SeqId id, int from, int n) {
  Batch b;
  for (int i = from; i < from + n; ++i) b.add(100 + i, i, int32_t(id), i + 1 == from + n);
  kv.begin_batch(b);
  std::vector<float> k(size_t(n) * 64), v(k.size());
  for (int i = 0; i < n; ++i)
    for (int x = 0; x < 64; ++x) k[size_t(i) * 64 + size_t(x)] = key(from + i, x), v[size_t(i) * 64 + size_t(x)] = -key(from + i, x);
  kv.store(0, k.data(), v.data());
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(100 + i);
  return t;
}

TEST(PrefixKv, StoresAttendsAndSharesARetainedPrefix) {
  PrefixKv kv(kLayout, 4 * kLayout.chunk_bytes(), 1);
  int matched = -1;
  ASSERT_TRUE(kv.join(1, {}, &matched).ok());
  EXPECT_EQ(matched, 0);
  run_prompt(kv, 1, 0, 70);
  float k[64], v[64];
  kv.read_kv(1, 65, 0, 0, k, v);
  EXPECT_EQ(k[3], key(65, 3));
  EXPECT_EQ(v[7], -key(65, 7));
  // A zero query weighs the keys it sees alike: row i gets the mean of V's
  // rows 0..i.
  std::vector<float> q(70 * 64, 0.0f), out(q.size());
  kv.attend(0, q.data(), out.data(), {});
  for (int i : {0, 1, 63, 64, 69})
    EXPECT_NEAR(out[size_t(i) * 64 + 5], -(float(i) / 2 + 0.05f), 1e-4) << "row " << i;
  ASSERT_TRUE(kv.leave(1).ok());
  EXPECT_EQ(kv.stats().cached, 2);
  // Retained: a full chunk shared, the partial one's 6 tokens copied.
  ASSERT_TRUE(kv.join(2, prompt(70), &matched).ok());
  EXPECT_EQ(matched, 70);
  EXPECT_EQ(kv.length(2), 70);
  for (int i : {3, 64, 69}) {
    kv.read_kv(2, i, 0, 0, k, v);
    EXPECT_EQ(k[9], key(i, 9)) << "token " << i;
    EXPECT_EQ(v[9], -key(i, 9));
  }
  ASSERT_TRUE(kv.fork(2, 3).ok());
  kv.read_kv(3, 66, 0, 0, k, v);
  EXPECT_EQ(k[0], key(66, 0));
  EXPECT_EQ(kv.stats().used, 2);    // the full chunk, 2's copy of the partial one (both read by 2 and 3)
  EXPECT_EQ(kv.stats().cached, 1);  // the retained partial chunk
}

TEST(PrefixKv, ABatchItCannotTakeChangesNothing) {
  PrefixKv kv(kLayout, 2 * kLayout.chunk_bytes(), 1);
  int matched = 0;
  ASSERT_TRUE(kv.join(1, {}, &matched).ok());
  const KvStats before = kv.stats();
  Batch big;
  for (int i = 0; i < 200; ++i) big.add(5, i, 1, false);
  try {
    kv.begin_batch(big);
    FAIL() << "a batch of 4 chunks fit a pool of 2";
  } catch (const KvError& e) {
    EXPECT_EQ(e.code(), KvCode::kPoolExhausted);
    EXPECT_STREQ(e.what(), "KV pool full: the batch needs 4 chunks, 2 available");
  }
  EXPECT_EQ(kv.length(1), 0);
  EXPECT_EQ(kv.stats().free, before.free);
  Batch stranger;
  stranger.add(5, 0, 7, true);
  try {
    kv.begin_batch(stranger);
    FAIL() << "a batch named a sequence that never joined";
  } catch (const KvError& e) {
    EXPECT_EQ(e.code(), KvCode::kUnknownSequence);
    EXPECT_STREQ(e.what(), "batch names sequence 7, which has not joined");
  }
}

}  // namespace
}  // namespace cs
