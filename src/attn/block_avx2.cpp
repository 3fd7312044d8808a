// AVX2 block kernel: 8-wide fp32 FMAs, F16C for fp16 K/V.
#include <immintrin.h>

#include "attn/exp_impl.h"
#include "attn/block_impl.h"

namespace {

struct Ops256 {
  using V = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kRows = 2;    // 8 score accumulators + 4 keys
  static constexpr int kPvRows = 1;  // 8 accumulators over 64 columns + 8 values
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V load(const BHalf* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void storef(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale_pow2(V p, V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float max_row(const float* s, int n) {
    V m = set1(kNegInf);
    for (int t = 0; t < n; t += kWidth) m = max(m, load(s + t));
    return hmax(m);
  }
  static float exp_row(float* s, int n, float mx) {
    V sum = zero();
    const V vm = set1(mx);
    for (int t = 0; t < n; t += kWidth) {
      const V x = load(s + t);
      const V live = _mm256_cmp_ps(x, set1(kNegInf), _CMP_NEQ_OQ);
      const V p = _mm256_and_ps(live, exp_nonpos<V, Ops256>(sub(x, vm)));
      store(s + t, p);
      sum = _mm256_add_ps(sum, p);
    }
    return hsum(sum);
  }
  static float exp1(float x) { return _mm256_cvtss_f32(exp_nonpos<V, Ops256>(set1(x))); }
};

}  // namespace

namespace cs {
void block_update_avx2(const BlockJob& job) { block_entry<Ops256>(job); }
}  // namespace cs
