#include "model/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "attn/exp_impl.h"
#include "model/ops_math.h"

namespace {

// The 8-wide operations attn/exp_impl.h's exp needs. AVX2 is the binary's
// baseline (CMakeLists.txt, CS_BASE_FLAGS), so no dispatch is needed here.
struct Avx2 {
  using V = __m256;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(set1(-0.0f), a); }
  static V copysign(V mag, V sgn) { return _mm256_or_ps(mag, _mm256_and_ps(sgn, set1(-0.0f))); }
  static V scale_pow2(V p, V n) {  // p * 2^n; n < -126 gives +0 (as in block_avx2.cpp)
    n = _mm256_max_ps(n, set1(-127.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
};

// x sigmoid(z) u with e = exp(-|z|) in (0, 1], so nothing overflows:
// sigmoid(z) = 1 / (1 + e) for z >= 0 and e / (1 + e) for z < 0.
__m256 times_sigmoid8(__m256 x, __m256 z, __m256 u) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // exp(-|z|); the clamp keeps its argument times log2(e) finite for |z|
  // near FLT_MAX (the exp is 0 from -88 on anyway).
  const __m256 n = _mm256_max_ps(_mm256_or_ps(z, sign), _mm256_set1_ps(-100.0f));
  const __m256 e = exp_nonpos<__m256, Avx2>(n);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 num = _mm256_blendv_ps(one, e, z);  // e where z's sign bit is set
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(one, e))), u);
}

// silu(g) u = g sigmoid(g) u.
__m256 swiglu8(__m256 g, __m256 u) { return times_sigmoid8(g, g, u); }

// GELU's tanh form is a sigmoid: 0.5 (1 + tanh(y)) = sigmoid(2y), with
// y = sqrt(2/pi) (g + 0.044715 g^3); so gelu(g) u = g sigmoid(z) u with z = 2y.
using cs::fp::kGeluC;
using cs::fp::kGeluZ;  // 2 sqrt(2/pi)

__m256 geglu8(__m256 g, __m256 u) {
  const __m256 g2 = _mm256_mul_ps(g, g);
  const __m256 z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluZ), g),
                                 _mm256_fmadd_ps(_mm256_set1_ps(kGeluC), g2, _mm256_set1_ps(1.0f)));
  return times_sigmoid8(g, z, u);
}

// gpt-oss's SwiGLU: the gate clamped above at 7, the up value to [-7, 7]
// and shifted by 1, sigmoid(1.702 g) in place of sigmoid(g).
using cs::fp::kOaiAlpha;
using cs::fp::kOaiLimit;

__m256 swiglu_oai8(__m256 g, __m256 u) {
  const __m256 lim = _mm256_set1_ps(kOaiLimit);
  const __m256 x = _mm256_min_ps(g, lim);
  const __m256 y = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-kOaiLimit)), lim), _mm256_set1_ps(1.0f));
  return times_sigmoid8(x, _mm256_mul_ps(_mm256_set1_ps(kOaiAlpha), x), y);
}

// out = f(gate, up) elementwise, 8 at a time, the tail one by one with
// model/ops_math.h's steps, which give the vector's bits (tests/ops_test.cpp). A
// prefill's n is large (512 tokens x SmolLM2's 1536 = 786k), and this runs
// between two parallel matmuls: split it too, or one core idles.
// (Template arguments, so each stays inlined in its loop.)
template <__m256 (*f8)(__m256, __m256), float (*f1)(float, float)>
void gated(const float* gate, const float* up, size_t n, float* out) {
  const long n8 = long(n / 8);
#pragma omp parallel for schedule(static) if (n8 >= 4096)
  for (long b = 0; b < n8; ++b) _mm256_storeu_ps(out + 8 * b, f8(_mm256_loadu_ps(gate + 8 * b), _mm256_loadu_ps(up + 8 * b)));
  for (size_t i = size_t(n8) * 8; i < n; ++i) out[i] = f1(gate[i], up[i]);
}

}  // namespace

namespace cs {

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  // Sum in double: the residual stream of small Llamas has outliers in the
  // tens of thousands, and the norm feeds every later rounding decision. In
  // ops_math.h's 32 lanes (what a warp sums on the GPU): value i in lane
  // i % 32, here 8 vectors of 4 lanes each.
  __m256d acc[8];
  for (__m256d& a : acc) a = _mm256_setzero_pd();
  int i = 0;
  for (; i + fp::kNormLanes <= n; i += fp::kNormLanes)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      const __m256 sq = _mm256_mul_ps(v, v);
      acc[2 * k] = _mm256_add_pd(acc[2 * k], _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
      acc[2 * k + 1] = _mm256_add_pd(acc[2 * k + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
  alignas(32) double lanes[fp::kNormLanes];
  for (int k = 0; k < 8; ++k) _mm256_store_pd(lanes + 4 * k, acc[k]);
  for (; i < n; ++i) lanes[i % fp::kNormLanes] += double(fp::mul(x[i], x[i]));
  const float scale = fp::rms_scale(fp::sum_lanes(lanes), n, eps);
#pragma omp simd
  for (int j = 0; j < n; ++j) out[j] = fp::norm_value(x[j], scale, w[j]);
}

void softcap(float* x, size_t n, float cap) {
  const __m256 inv = _mm256_set1_ps(1.0f / cap), vcap = _mm256_set1_ps(cap);
  const long n8 = long(n / 8);
#pragma omp parallel for schedule(static) if (n8 >= 16384)
  for (long b = 0; b < n8; ++b) _mm256_storeu_ps(x + 8 * b, softcap_vec<Avx2>(_mm256_loadu_ps(x + 8 * b), vcap, inv));
  for (size_t i = size_t(n8) * 8; i < n; ++i) x[i] = fp::softcap(x[i], cap);
}

double exp_weights(const float* x, size_t n, float m, float scale, float* w) {
  const __m256 vm = _mm256_set1_ps(m), vs = _mm256_set1_ps(scale);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // The clamp keeps the product finite when scale is large (tiny temperatures).
    const __m256 d = _mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vs), _mm256_set1_ps(-100.0f));
    const __m256 e = exp_nonpos<__m256, Avx2>(d);
    _mm256_storeu_ps(w + i, e);
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  double sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += (w[i] = std::exp(std::max((x[i] - m) * scale, -100.0f)));
  return sum;
}

void swiglu(const float* gate, const float* up, size_t n, float* out) { gated<swiglu8, fp::swiglu>(gate, up, n, out); }

void geglu(const float* gate, const float* up, size_t n, float* out) { gated<geglu8, fp::geglu>(gate, up, n, out); }

void swiglu_oai(const float* gate, const float* up, size_t n, float* out) {
  gated<swiglu_oai8, fp::swiglu_oai>(gate, up, n, out);
}

double RopeParams::angle(double pos, int i) const {
  double extrap = pos * std::pow(base, -2.0 * i / rot_dim);
  if (!factors.empty()) extrap /= double(factors[size_t(i)]);
  const double interp = freq_scale * extrap;
  if (!yarn || ext_factor == 0.0) return interp;
  const double y = (double(i) - yarn_low) / std::max(0.001, yarn_high - yarn_low);
  const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * ext_factor;
  return interp * (1.0 - mix) + extrap * mix;
}

void RopeTable::build(const int32_t* pos, int n_tok, const RopeParams& p) {
  static std::atomic<uint64_t> builds{0};
  generation = ++builds;
  half = p.rot_dim / 2;
  style = p.style;
  cos_.resize(size_t(n_tok) * half);
  sin_.resize(size_t(n_tok) * half);
  const double m = p.mscale;
  for (int t = 0; t < n_tok; ++t)
    for (int i = 0; i < half; ++i) {
      const double theta = p.angle(double(pos[t]), i);
      cos_[size_t(t) * half + i] = float(std::cos(theta) * m);
      sin_[size_t(t) * half + i] = float(std::sin(theta) * m);
    }
}

double attn_temperature(int32_t pos, double scale, int floor_len) {
  return 1.0 + scale * std::log(std::floor(double(pos) / floor_len) + 1.0);
}

void RopeTable::temper(const int32_t* pos, double scale, int floor_len) {
  static std::atomic<uint64_t> tempers{0};
  generation = (uint64_t(1) << 63) | ++tempers;  // apart from build()'s
  const size_t n_tok = half ? cos_.size() / size_t(half) : 0;
  for (size_t t = 0; t < n_tok; ++t) {
    const double s = attn_temperature(pos[t], scale, floor_len);
    for (int i = 0; i < half; ++i) {
      cos_[t * half + i] = float(cos_[t * half + i] * s);
      sin_[t * half + i] = float(sin_[t * half + i] * s);
    }
  }
}

void rope(float* x, int n_heads, int head_dim, const RopeTable& table, int token) {
  const float* c = table.cos_.data() + size_t(token) * table.half;
  const float* s = table.sin_.data() + size_t(token) * table.half;
  // The partner of dimension i: i + 1 (adjacent pairs) or i + half.
  const bool adjacent = table.style == RopeStyle::kAdjacent;
  const int stride = adjacent ? 2 : 1, partner = adjacent ? 1 : table.half;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + size_t(h) * head_dim;
    for (int i = 0; i < table.half; ++i) {
      float* a = v + stride * i;
      fp::rotate(a[0], a[partner], c[i], s[i]);
    }
  }
}

void add_bias(float* x, const float* b, int n, int n_tok) {
  for (int t = 0; t < n_tok; ++t)
#pragma omp simd
    for (int i = 0; i < n; ++i) x[size_t(t) * n + i] += b[i];
}

}  // namespace cs
