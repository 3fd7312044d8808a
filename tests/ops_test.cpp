#include "model/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model/ops_math.h"

namespace cs {
namespace {

TEST(Ops, RmsNormKnownValues) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f};
  float out[4];
  rmsnorm(x, w, 4, 0.0f, out);
  const float r = std::sqrt((1 + 4 + 9 + 16) / 4.0f);
  EXPECT_FLOAT_EQ(out[0], 1 / r);
  EXPECT_FLOAT_EQ(out[2], 6 / r);
  EXPECT_FLOAT_EQ(out[3], 2 / r);
}

TEST(Ops, SwiGlu) {
  const float g[2] = {0, 2}, u[2] = {5, 3};
  float out[2];
  swiglu(g, u, 2, out);
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 2 / (1 + std::exp(-2.0f)) * 3);
}

// The vector path (blocks of 8, split over threads for large n) and the
// scalar tail against a double reference: gates over a wide range, the
// extremes whose exp would overflow a naive sigmoid, signed zeros, and the
// output written over the gate, as the forward pass does.
TEST(Ops, SwiGluMatchesDoubleReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
  std::normal_distribution<float> nd;
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(13), size_t(40000), size_t(8 * 4096 + 5)}) {
    std::vector<float> g(n), u(n);
    for (size_t i = 0; i < n; ++i) g[i] = i % 3 ? wide(rng) : nd(rng), u[i] = nd(rng);
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 100.0f, -100.0f, 1e4f, -1e4f, 3e38f, -3e38f};
    for (size_t i = 0; i < n && i < std::size(edge); ++i) g[n - 1 - i] = edge[i];
    std::vector<float> out = g;
    swiglu(out.data(), u.data(), n, out.data());
    for (size_t i = 0; i < n; ++i) {
      const double x = g[i], ref = x / (1.0 + std::exp(-x)) * u[i];
      const double tol = (1.0 + std::fabs(x) / 10) * 1e-6 * std::fabs(ref) + 1e-30;
      ASSERT_NEAR(out[i], ref, tol) << "gate " << g[i] << " at " << i << " of " << n;
    }
  }
}

// GeGLU (Gemma): gelu's tanh form times up, against double-precision tanh;
// the cubic makes its sigmoid's argument z large fast, so the bound grows
// with |z| as swiglu's with |gate|; huge gates give g * up or 0, never NaN.
TEST(Ops, GeGluMatchesDoubleReference) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  std::normal_distribution<float> nd;
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(13), size_t(40000), size_t(8 * 4096 + 5)}) {
    std::vector<float> g(n), u(n);
    for (size_t i = 0; i < n; ++i) g[i] = i % 3 ? wide(rng) : nd(rng), u[i] = nd(rng);
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 1e4f, -1e4f, 3e38f, -3e38f};
    for (size_t i = 0; i < n && i < std::size(edge); ++i) g[n - 1 - i] = edge[i], u[n - 1 - i] = 0.25f;
    std::vector<float> out = g;
    geglu(out.data(), u.data(), n, out.data());
    for (size_t i = 0; i < n; ++i) {
      const double x = g[i], y = 0.7978845608028654 * (x + 0.044715 * x * x * x);
      const double ref = x / (1.0 + std::exp(-2 * y)) * u[i];  // 0.5 (1 + tanh y), without 1 + -1
      const double tol = (1.0 + std::fabs(2 * y) / 4) * 1e-6 * std::fabs(ref) + 1e-30;
      ASSERT_FALSE(std::isnan(out[i])) << "gate " << g[i];
      ASSERT_NEAR(out[i], ref, tol) << "gate " << g[i] << " at " << i << " of " << n;
    }
  }
  const float g1[1] = {1.0f}, u1[1] = {2.0f};
  float o1[1];
  geglu(g1, u1, 1, o1);
  EXPECT_NEAR(o1[0], 2 * 0.8411920f, 1e-6);  // gelu_tanh(1) = 0.841192
}

// gpt-oss's clamped SwiGLU against double precision: gates above 7 and up
// values outside [-7, 7] clamped (values by hand), the rest as swiglu with
// 1.702 in the sigmoid; huge values never NaN.
TEST(Ops, SwiGluOaiClampsAndMatchesDoubleReference) {
  const float g[3] = {0.0f, 10.0f, -3.0f}, u[3] = {5.0f, 20.0f, -9.0f};
  float out[3];
  swiglu_oai(g, u, 3, out);
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 7 / (1 + std::exp(-1.702 * 7)) * 8, 1e-5);   // gate 7, up 7 + 1
  EXPECT_NEAR(out[2], -3 / (1 + std::exp(1.702 * 3)) * -6, 1e-6);  // up -7 + 1
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
  for (size_t n : {size_t(1), size_t(13), size_t(40000), size_t(8 * 4096 + 5)}) {
    std::vector<float> gs(n), us(n);
    for (size_t i = 0; i < n; ++i) gs[i] = wide(rng), us[i] = wide(rng) / 2;
    const float edge[] = {0.0f, -0.0f, 7.0f, -7.0f, 1e4f, -1e4f, 3e38f, -3e38f};
    for (size_t i = 0; i < n && i < std::size(edge); ++i) gs[n - 1 - i] = edge[i], us[n - 1 - i] = edge[i];
    std::vector<float> o = gs;
    swiglu_oai(o.data(), us.data(), n, o.data());
    for (size_t i = 0; i < n; ++i) {
      const double x = std::min(double(gs[i]), 7.0), y = std::clamp(double(us[i]), -7.0, 7.0) + 1;
      const double ref = x / (1.0 + std::exp(-1.702 * x)) * y;
      const double tol = (1.0 + std::fabs(1.702 * x) / 10) * 1e-6 * std::fabs(ref) + 1e-30;
      ASSERT_FALSE(std::isnan(o[i])) << "gate " << gs[i];
      ASSERT_NEAR(o[i], ref, tol) << "gate " << gs[i] << " up " << us[i] << " at " << i << " of " << n;
    }
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Gemma 2's soft-capped logits: cap tanh(x / cap) within the vector exp's
// error (cap * 1e-6) of the library's tanh, for values across the cap's
// range and past it (where tanh is 1 to float precision), odd in x; a tail
// of 5 values takes the scalar steps.
TEST(Ops, SoftcapIsCapTimesTanh) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-200.0f, 200.0f);
  for (float cap : {50.0f, 30.0f, 2.0f}) {
    std::vector<float> x(8 * 1000 + 5);
    for (float& v : x) v = u(rng) * cap / 30.0f;
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-20f, x[3] = 1e30f, x[4] = -1e30f;
    std::vector<float> y = x, neg(x.size());
    softcap(y.data(), y.size(), cap);
    for (size_t i = 0; i < x.size(); ++i) neg[i] = -x[i];
    softcap(neg.data(), neg.size(), cap);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(y[i], cap * std::tanh(double(x[i]) / cap), cap * 1e-6) << x[i] << " cap " << cap;
      ASSERT_EQ(neg[i], -y[i]) << x[i];
      ASSERT_LE(std::fabs(y[i]), cap);
    }
    EXPECT_TRUE(same_bits(y[1], -0.0f) || y[1] == 0.0f);
    EXPECT_EQ(y[3], cap);
  }
}

// The vector loops against model/ops_math.h's steps one value at a time (the
// GPU's kernels run those): the same bits for every value, edges included
// (signed zeros, huge, subnormal, NaN, the exp's underflow near -87..-104).
TEST(Ops, VectorLoopsGiveTheScalarStepsBits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  const size_t n = 8 * 4096 + 8 * 37;  // the threaded split, and whole vectors only (no tail)
  std::vector<float> g(n), u(n);
  for (size_t i = 0; i < n; ++i) g[i] = i % 2 ? wide(rng) : nd(rng) * 4, u[i] = i % 5 ? nd(rng) : wide(rng) / 8;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f, 87.0f, -87.5f, 88.7f, -95.0f, -104.0f,
                        7.0f, -7.0f, 1e4f, -1e4f, 3e38f, -3e38f, nan, -nan};
  for (size_t i = 0; i < std::size(edge); ++i)
    for (size_t j = 0; j < std::size(edge); ++j) g[i * std::size(edge) + j] = edge[i], u[i * std::size(edge) + j] = edge[j];
  std::vector<float> out(n);
  swiglu(g.data(), u.data(), n, out.data());
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], fp::swiglu(g[i], u[i]))) << "swiglu " << g[i] << " " << u[i];
  geglu(g.data(), u.data(), n, out.data());
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], fp::geglu(g[i], u[i]))) << "geglu " << g[i] << " " << u[i];
  swiglu_oai(g.data(), u.data(), n, out.data());
  for (size_t i = 0; i < n; ++i)
    ASSERT_TRUE(same_bits(out[i], fp::swiglu_oai(g[i], u[i]))) << "swiglu_oai " << g[i] << " " << u[i];
  for (float cap : {30.0f, 1.5f}) {
    out = g;
    softcap(out.data(), n, cap);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(out[i], fp::softcap(g[i], cap))) << "softcap " << g[i] << " " << cap;
  }
  // A tail (n % 8 != 0) takes the scalar steps: the same bits as a whole vector.
  std::vector<float> tail(13);
  swiglu(g.data(), u.data(), 13, tail.data());
  for (size_t i = 0; i < 13; ++i) ASSERT_TRUE(same_bits(tail[i], fp::swiglu(g[i], u[i]))) << i;
}

// rmsnorm's sum is ops_math.h's 32 lanes and shuffle tree, whatever the
// length (vectors of 32 and a tail), and rope's pairs are fp::rotate.
TEST(Ops, RmsNormAndRopeAreTheScalarSteps) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  for (int n : {1, 31, 32, 64, 100, 576, 2048, 2049}) {
    std::vector<float> x(static_cast<size_t>(n)), w(x.size()), out(x.size());
    for (int i = 0; i < n; ++i) x[size_t(i)] = nd(rng) * (i % 97 == 0 ? 3000.0f : 1.0f), w[size_t(i)] = nd(rng);
    rmsnorm(x.data(), w.data(), n, 1e-6f, out.data());
    double lanes[fp::kNormLanes] = {};
    for (int i = 0; i < n; ++i) lanes[i % 32] += double(fp::mul(x[size_t(i)], x[size_t(i)]));
    const float scale = fp::rms_scale(fp::sum_lanes(lanes), n, 1e-6f);
    for (int i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[size_t(i)], fp::norm_value(x[size_t(i)], scale, w[size_t(i)]))) << n << " " << i;
  }
  const int32_t pos[2] = {3, 70000};
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves}) {
    RopeParams p;
    p.rot_dim = 64, p.style = style;
    RopeTable t;
    t.build(pos, 2, p);
    std::vector<float> x(128), y;
    for (float& v : x) v = nd(rng);
    y = x;
    rope(y.data(), 2, 64, t, 1);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 32; ++i) {
        const int a = h * 64 + (style == RopeStyle::kAdjacent ? 2 * i : i), b = a + (style == RopeStyle::kAdjacent ? 1 : 32);
        float x0 = x[size_t(a)], x1 = x[size_t(b)];
        fp::rotate(x0, x1, t.cos_[32 + size_t(i)], t.sin_[32 + size_t(i)]);
        ASSERT_TRUE(same_bits(y[size_t(a)], x0) && same_bits(y[size_t(b)], x1)) << h << " " << i;
      }
  }
}

RopeParams rope_params(int rot_dim, double base, RopeStyle style = RopeStyle::kAdjacent) {
  RopeParams p;
  p.rot_dim = rot_dim;
  p.base = base;
  p.style = style;
  return p;
}

TEST(Rope, PositionZeroIsIdentityAndPairsRotate) {
  const int32_t pos[2] = {0, 1};
  RopeTable t;
  t.build(pos, 2, rope_params(4, 10000.0));
  float x[4] = {1, 2, 3, 4};
  rope(x, 1, 4, t, 0);
  EXPECT_FLOAT_EQ(x[0], 1);
  EXPECT_FLOAT_EQ(x[3], 4);
  float y[4] = {1, 0, 1, 0};
  rope(y, 1, 4, t, 1);  // pair 0 by 1 rad, pair 1 by 1/100 rad
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(y[2], std::cos(0.01), 1e-6);
  EXPECT_NEAR(y[3], std::sin(0.01), 1e-6);
}

// Prompt Cache reuses K at arbitrary position ids: rotating by p then by q
// must equal rotating by p + q directly, for far-apart, non-contiguous ids.
TEST(Rope, RotationsCompose) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int d = 64, heads = 3;
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves})
  for (auto [p, q] : {std::pair{5, 7}, {1000, 3}, {0, 4095}, {8191, 1}, {123, 4000}}) {
    std::vector<float> x(d * heads), a, b;
    for (auto& v : x) v = nd(rng);
    a = b = x;
    const int32_t ps[3] = {p, q, p + q};
    RopeTable t;
    t.build(ps, 3, rope_params(d, 100000.0, style));
    rope(a.data(), heads, d, t, 0);
    rope(a.data(), heads, d, t, 1);
    rope(b.data(), heads, d, t, 2);
    for (int i = 0; i < d * heads; ++i) EXPECT_NEAR(a[i], b[i], 2e-5) << p << "+" << q << " i " << i;
  }
}

// Attention scores depend only on the distance of the positions.
TEST(Rope, DotProductDependsOnRelativePosition) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  const int d = 64;
  std::vector<float> q0(d), k0(d);
  for (int i = 0; i < d; ++i) q0[i] = nd(rng), k0[i] = nd(rng);
  auto score = [&](int pq, int pk, RopeStyle style = RopeStyle::kAdjacent) {
    const int32_t ps[2] = {pq, pk};
    RopeTable t;
    t.build(ps, 2, rope_params(d, 10000.0, style));
    auto q = q0, k = k0;
    rope(q.data(), 1, d, t, 0);
    rope(k.data(), 1, d, t, 1);
    double s = 0;
    for (int i = 0; i < d; ++i) s += q[i] * k[i];
    return s;
  };
  EXPECT_NEAR(score(10, 3), score(1010, 1003), 1e-3);
  EXPECT_NEAR(score(7, 7), score(5000, 5000), 1e-3);
  EXPECT_NEAR(score(10, 3, RopeStyle::kHalves), score(1010, 1003, RopeStyle::kHalves), 1e-3);
}

// Qwen's layout turns dimension i with i + rot_dim/2; a partial rot_dim
// leaves the head's other dimensions alone.
TEST(Rope, HalvesStylePairsTheTwoHalves) {
  const int32_t pos[1] = {1};
  RopeTable t;
  t.build(pos, 1, rope_params(4, 10000.0, RopeStyle::kHalves));
  float x[6] = {1, 1, 0, 0, 5, 6};  // head_dim 6, rot_dim 4
  rope(x, 1, 6, t, 0);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);  // pair (0, 2) by 1 rad
  EXPECT_NEAR(x[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::cos(0.01), 1e-6);  // pair (1, 3) by 1/100 rad
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
  EXPECT_EQ(x[4], 5);
  EXPECT_EQ(x[5], 6);
}

// Linear scaling multiplies every angle; Llama 3's factors divide pair i's.
TEST(Rope, ScaleAndFrequencyFactors) {
  const int32_t pos[1] = {3};
  RopeTable t;
  RopeParams p = rope_params(4, 10000.0);
  p.freq_scale = 0.5;
  p.factors = {2.0f, 8.0f};
  t.build(pos, 1, p);
  float x[4] = {1, 0, 1, 0};
  rope(x, 1, 4, t, 0);
  EXPECT_NEAR(x[0], std::cos(3 * 0.5 / 2), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3 * 0.5 / 2), 1e-6);
  EXPECT_NEAR(x[2], std::cos(3 * 0.5 * 0.01 / 8), 1e-6);
  EXPECT_NEAR(x[3], std::sin(3 * 0.5 * 0.01 / 8), 1e-6);
}

}  // namespace
}  // namespace cs
