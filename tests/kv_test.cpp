#include "kv/contiguous_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace cs {
namespace {

// Plain softmax attention in double, for comparison.
std::vector<float> reference(const std::vector<float>& q, const std::vector<std::vector<float>>& ks,
                             const std::vector<std::vector<float>>& vs, int d) {
  std::vector<double> s(ks.size());
  double m = -1e300;
  for (size_t t = 0; t < ks.size(); ++t) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * ks[t][i];
    s[t] = dot / std::sqrt(double(d));
    m = std::max(m, s[t]);
  }
  double z = 0;
  for (auto& x : s) z += (x = std::exp(x - m));
  std::vector<float> out(d, 0);
  for (size_t t = 0; t < ks.size(); ++t)
    for (int i = 0; i < d; ++i) out[i] += float(s[t] / z * vs[t][i]);
  return out;
}

// Random interleaved batches of several sequences: each query sees exactly
// its own sequence's tokens up to itself, through the right KV head (GQA).
TEST(ContiguousKv, CausalGqaAttentionMatchesReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const KvShape shape{1, 4, 2, 16};
  const int d = shape.head_dim, kw = shape.kv_width(), qw = shape.n_heads * d;
  ContiguousKv kv(shape, 64);
  std::map<int, std::vector<std::vector<float>>> ks, vs;  // per seq: rows of kv_width
  for (int step = 0; step < 6; ++step) {
    Batch b;
    std::uniform_int_distribution<int> pick(0, 2), len(1, 4);
    for (int s = 0; s < 3; ++s)
      if (pick(rng) || step == 0)
        for (int n = len(rng); n > 0; --n) b.add(0, 0, s, true);
    const int n = b.size();
    std::vector<float> k(size_t(n) * kw), v(size_t(n) * kw), q(size_t(n) * qw), out(q.size());
    for (auto* a : {&k, &v, &q})
      for (auto& x : *a) x = nd(rng);
    kv.begin_batch(b);
    kv.store(0, k.data(), v.data());
    kv.attend(0, q.data(), out.data());
    for (int t = 0; t < n; ++t) {
      const int s = b.seq[t];
      ks[s].emplace_back(k.begin() + t * kw, k.begin() + (t + 1) * kw);
      vs[s].emplace_back(v.begin() + t * kw, v.begin() + (t + 1) * kw);
      for (int h = 0; h < shape.n_heads; ++h) {
        const int kvh = h / (shape.n_heads / shape.n_kv_heads);
        std::vector<std::vector<float>> kh, vh;
        for (size_t j = 0; j < ks[s].size(); ++j) {
          kh.emplace_back(ks[s][j].begin() + kvh * d, ks[s][j].begin() + (kvh + 1) * d);
          vh.emplace_back(vs[s][j].begin() + kvh * d, vs[s][j].begin() + (kvh + 1) * d);
        }
        const std::vector<float> qh(q.begin() + t * qw + h * d, q.begin() + t * qw + (h + 1) * d);
        const auto ref = reference(qh, kh, vh, d);
        for (int i = 0; i < d; ++i) ASSERT_NEAR(out[size_t(t) * qw + h * d + i], ref[i], 1e-5);
      }
    }
  }
  EXPECT_EQ(kv.length(0), int(ks[0].size()));
  kv.remove(0);
  EXPECT_EQ(kv.length(0), 0);
}

TEST(ContiguousKv, FullIsATypedErrorThatChangesNothing) {
  ContiguousKv kv({1, 1, 1, 4}, 3);
  Batch b;
  for (int i = 0; i < 3; ++i) b.add(0, i, 5, false);
  kv.begin_batch(b);
  Batch more;
  more.add(0, 3, 5, false);
  more.add(0, 0, 6, false);
  EXPECT_THROW(kv.begin_batch(more), KvFull);
  EXPECT_EQ(kv.length(5), 3);
  EXPECT_EQ(kv.length(6), 0);
}

}  // namespace
}  // namespace cs
