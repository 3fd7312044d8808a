#include "cache/contiguous_kv.h"
#include "kv/split_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <random>
#include <tuple>

#include "base/f16.h"

namespace cs {
namespace {

// Plain softmax attention in double, for comparison; a sink (gpt-oss) is
// one more logit in the softmax, with no value; softcap (Gemma 2) caps each
// score at cap tanh(s / cap).
std::vector<float> reference(const std::vector<float>& q, const std::vector<std::vector<float>>& ks,
                             const std::vector<std::vector<float>>& vs, int d, double sink = -INFINITY,
                             double softcap = 0) {
  std::vector<double> s(ks.size());
  double m = -1e300;
  for (size_t t = 0; t < ks.size(); ++t) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * ks[t][i];
    s[t] = dot / std::sqrt(double(d));
    if (softcap != 0) s[t] = softcap * std::tanh(s[t] / softcap);
    m = std::max(m, s[t]);
  }
  m = std::max(m, sink);
  double z = std::exp(sink - m);
  for (auto& x : s) z += (x = std::exp(x - m));
  std::vector<float> out(d, 0);
  for (size_t t = 0; t < ks.size(); ++t)
    for (int i = 0; i < d; ++i) out[i] += float(s[t] / z * vs[t][i]);
  return out;
}

struct CausalCase {
  KvShape shape;
  int max_batch;    // tokens per sequence per batch: 1..max_batch
  int steps;
  int prefill = 0;  // if > 0: the first batch holds this many tokens of each sequence
  int window = 0;   // if > 0: odd layers slide over this many positions
  bool sinks = false;  // every layer has a sink per query head (gpt-oss)
  float softcap = 0;   // scores soft-capped (Gemma 2)
};

// Random interleaved batches of several sequences (decode steps and prefills
// that cross the cache's 64-token blocks): each query sees exactly its own
// sequence's tokens up to itself, through the right KV head (GQA), in every
// layer. Head dims 64, 128 and 256 run the block kernel; 16 the plain loop.
// Each case runs for every storage type. The reference reads the K/V the
// cache holds (rounded to the type), so the bound is fp32 accumulation's
// 1e-5 for all three: rounding at store is the only effect of the type.
class ContiguousKvCausal : public ::testing::TestWithParam<std::tuple<CausalCase, KvType>> {};

float stored(KvType type, float x) {
  uint8_t b[4];
  store_kv_elem(b, int(type), x);
  return load_kv_elem(b, int(type));
}

TEST_P(ContiguousKvCausal, MatchesReference) {
  const auto [shape, max_batch, steps, prefill, window, with_sinks, softcap] = std::get<0>(GetParam());
  const KvType type = std::get<1>(GetParam());
  std::mt19937 rng(11 + shape.head_dim + max_batch), sink_rng(5);
  std::normal_distribution<float> nd;
  const int d = shape.head_dim, kw = shape.kv_width(), qw = shape.n_heads * d, L = shape.n_layers;
  ContiguousKv kv(shape, 400, type);
  // per layer, per seq: rows of kv_width
  std::vector<std::map<int, std::vector<std::vector<float>>>> ks(static_cast<size_t>(L)), vs(static_cast<size_t>(L));
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    Batch b;
    std::uniform_int_distribution<int> pick(0, 2), len(1, max_batch);
    for (int s = 0; s < 3; ++s)
      if (pick(rng) || step == 0)
        for (int n = step == 0 && prefill ? prefill : len(rng), k = 0; k < n; ++k) b.add(0, kv.length(s) + k, s, true);
    const int n = b.size();
    kv.begin_batch(b);
    for (int layer = 0; layer < L; ++layer) {
      std::vector<float> k(size_t(n) * kw), v(size_t(n) * kw), q(size_t(n) * qw), out(q.size());
      for (auto* a : {&k, &v, &q})
        for (auto& x : *a) x = nd(rng);
      kv.store(layer, k.data(), v.data());
      const int w = layer % 2 ? window : 0;
      // Sinks around the scores' size (N(0, 1)), so some rows' sinks dominate
      // (their own generator: the batches stay those of the cases without).
      std::vector<float> sinks(size_t(shape.n_heads));
      for (auto& x : sinks) x = 1.5f * nd(sink_rng);
      kv.attend(layer, q.data(), out.data(), {w, with_sinks ? sinks.data() : nullptr, softcap});
      for (auto* a : {&k, &v})
        for (auto& x : *a) x = stored(type, x);
      auto& lk = ks[size_t(layer)];
      auto& lv = vs[size_t(layer)];
      for (int t = 0; t < n; ++t) {
        const int s = b.seq[t];
        lk[s].emplace_back(k.begin() + t * kw, k.begin() + (t + 1) * kw);
        lv[s].emplace_back(v.begin() + t * kw, v.begin() + (t + 1) * kw);
        for (int h = 0; h < shape.n_heads; ++h) {
          const int kvh = h / (shape.n_heads / shape.n_kv_heads);
          std::vector<std::vector<float>> kh, vh;
          // Positions are indices here: a window keeps the last w keys.
          for (size_t j = w ? size_t(std::max(0, int(lk[s].size()) - w)) : 0; j < lk[s].size(); ++j) {
            kh.emplace_back(lk[s][j].begin() + kvh * d, lk[s][j].begin() + (kvh + 1) * d);
            vh.emplace_back(lv[s][j].begin() + kvh * d, lv[s][j].begin() + (kvh + 1) * d);
          }
          const std::vector<float> qh(q.begin() + t * qw + h * d, q.begin() + t * qw + (h + 1) * d);
          const auto ref = reference(qh, kh, vh, d, with_sinks ? sinks[size_t(h)] : -INFINITY, softcap);
          for (int i = 0; i < d; ++i) {
            const float got = out[size_t(t) * qw + h * d + i];
            ASSERT_NEAR(got, ref[size_t(i)], 1e-5) << "layer " << layer << " token " << t << " head " << h;
            worst = std::max(worst, double(std::fabs(got - ref[size_t(i)])));
          }
        }
      }
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(kv.length(s), int(ks[0][s].size()));
  EXPECT_GT(kv.length(0), 64);  // the walk crossed blocks
  kv.remove(0);
  EXPECT_EQ(kv.length(0), 0);
  RecordProperty("max_abs_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ContiguousKvCausal,
                         ::testing::Combine(::testing::Values(CausalCase{{1, 4, 2, 16}, 40, 6},     // plain loop
                                           CausalCase{{2, 9, 3, 64}, 70, 5},     // SmolLM2's GQA 3
                                           CausalCase{{1, 4, 1, 128}, 90, 4},    // GQA 4, d 128
                                           CausalCase{{1, 2, 2, 64}, 3, 40},     // no GQA, decode-like
                                           // Decode after a long prefill: few calls, so each
                                           // walk is split into parts merged afterwards.
                                           CausalCase{{1, 4, 1, 64}, 1, 5, 300},
                                           CausalCase{{2, 3, 1, 128}, 2, 4, 380},
                                           // Sliding windows on odd layers (Gemma 3: head dim
                                           // 256, one KV head), in prefill and split decode.
                                           CausalCase{{2, 4, 1, 256}, 70, 9, 0, 50},
                                           CausalCase{{2, 4, 1, 64}, 1, 5, 300, 100},
                                           // Sinks (gpt-oss: with windows on alternate layers), on
                                           // the plain loop, in prefill and in split decode.
                                           CausalCase{{1, 4, 2, 16}, 40, 6, 0, 0, true},
                                           CausalCase{{2, 8, 2, 64}, 70, 6, 0, 50, true},
                                           CausalCase{{2, 4, 1, 64}, 1, 5, 300, 100, true},
                                           // Soft-capped scores (Gemma 2: head dim 256, windows
                                           // on alternate layers), a cap near the scores' size
                                           // (N(0, 1)), on the plain loop, in prefill and in
                                           // split decode.
                                           CausalCase{{1, 4, 2, 16}, 40, 6, 0, 0, false, 1.5f},
                                           CausalCase{{2, 8, 4, 256}, 70, 6, 0, 50, false, 1.5f},
                                           CausalCase{{2, 4, 1, 64}, 1, 5, 300, 100, false, 1.5f}),
                                            ::testing::Values(KvType::kF32, KvType::kF16, KvType::kBF16)),
                         [](const auto& info) {
                           const CausalCase& c = std::get<0>(info.param);
                           const KvShape& s = c.shape;
                           std::string name = "d";  // appended, not '+'-chained (GCC 12 -Wrestrict)
                           name += std::to_string(s.head_dim);
                           name += "_gqa" + std::to_string(s.n_heads / s.n_kv_heads);
                           name += "_batch" + std::to_string(c.max_batch);
                           if (c.prefill) name += "_prefill" + std::to_string(c.prefill);
                           if (c.window) name += "_window" + std::to_string(c.window);
                           if (c.sinks) name += "_sinks";
                           if (c.softcap != 0) name += "_softcap";
                           name += "_";
                           name += kv_type_name(std::get<1>(info.param));
                           return name;
                         });

TEST(ContiguousKv, FullIsATypedErrorThatChangesNothing) {
  ContiguousKv kv({1, 1, 1, 4}, 3);
  Batch b;
  for (int i = 0; i < 3; ++i) b.add(0, i, 5, false);
  kv.begin_batch(b);
  Batch more;
  more.add(0, 3, 5, false);
  more.add(0, 0, 6, false);
  try {
    kv.begin_batch(more);
    ADD_FAILURE() << "no KvError";
  } catch (const KvError& e) {
    EXPECT_EQ(e.code(), KvCode::kContextFull);
    EXPECT_STREQ(e.what(), "sequence 5 would hold 4 tokens, more than the context of 3");
  }
  EXPECT_EQ(kv.length(5), 3);
  EXPECT_EQ(kv.length(6), 0);
}

// Records what a store is given: the batch's tokens and the first float of
// each row it reads or writes.
struct Recorder : KvStore {
  std::vector<int32_t> tokens, seqs;
  std::vector<float> stored, attended;
  int rows = 0;
  void begin_batch(const Batch& b) override {
    tokens = b.tokens;
    seqs = b.seq;
    rows = b.size();
  }
  void store(int, const float* k, const float* v) override {
    for (int r = 0; r < rows; ++r) stored.push_back(k[r * 2] + v[r * 2 + 1]);
  }
  void attend(int, const float* q, float* out, const LayerAttention&) override {
    for (int r = 0; r < rows; ++r) attended.push_back(q[r * 3]), out[r * 3] = -q[r * 3];
  }
};

TEST(SplitKv, EachStoreGetsItsRows) {
  Recorder a, b;
  SplitKv split(a, b, 2, 3);  // K/V rows of 2 floats, query rows of 3
  Batch batch;
  for (int i = 0; i < 5; ++i) batch.add(10 + i, i, i < 2 ? 7 : 0, false);
  split.set_split(2);
  split.begin_batch(batch);
  std::vector<float> k(10), v(10), q(15), out(15, 0);
  for (int i = 0; i < 10; ++i) k[size_t(i)] = float(i), v[size_t(i)] = float(100 * i);
  for (int i = 0; i < 15; ++i) q[size_t(i)] = float(i);
  split.store(0, k.data(), v.data());
  split.attend(0, q.data(), out.data(), {});
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{12, 13, 14}));
  EXPECT_EQ(b.seqs, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(a.stored, (std::vector<float>{0 + 100, 2 + 300}));
  EXPECT_EQ(b.stored, (std::vector<float>{4 + 500, 6 + 700, 8 + 900}));
  EXPECT_EQ(a.attended, (std::vector<float>{0, 3}));
  EXPECT_EQ(b.attended, (std::vector<float>{6, 9, 12}));
  for (int r = 0; r < 5; ++r) EXPECT_EQ(out[size_t(r * 3)], -float(r * 3));
  // All rows to one store: the other is not called.
  Recorder c, d;
  SplitKv all(c, d, 2, 3);
  all.set_split(5);
  all.begin_batch(batch);
  all.store(0, k.data(), v.data());
  EXPECT_EQ(c.rows, 5);
  EXPECT_TRUE(d.tokens.empty() && d.stored.empty());
  all.set_split(6);
  try {
    all.begin_batch(batch);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "split at row 6 of a batch of 5");
  }
}

}  // namespace
}  // namespace cs
