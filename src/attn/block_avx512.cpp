// AVX-512 block kernel: 16-wide fp32 FMAs, vcvtph2ps for fp16 K/V.
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_* in the
// reduce and convert intrinsics); the warning is about the header, not us.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "attn/exp_impl.h"
#include "attn/block_impl.h"

namespace {

struct Ops512 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kRows = 6;    // score rows per register block (24 accumulators)
  static constexpr int kPvRows = 6;  // output rows per register block (24 accumulators)
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const Half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V load(const BHalf* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void storef(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V a) { return _mm512_cvtepi32_ps(_mm512_cvtps_epi32(a)); }
  static V scale_pow2(V p, V n) {
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  }
  static float max_row(const float* s, int n) {
    V m = set1(kNegInf);
    for (int t = 0; t < n; t += kWidth) m = max(m, load(s + t));
    return _mm512_reduce_max_ps(m);
  }
  static float exp_row(float* s, int n, float mx) {
    V sum = zero();
    const V vm = set1(mx);
    for (int t = 0; t < n; t += kWidth) {
      const V x = load(s + t);
      const __mmask16 live = _mm512_cmp_ps_mask(x, set1(kNegInf), _CMP_NEQ_OQ);
      const V p = _mm512_maskz_mov_ps(live, exp_nonpos<V, Ops512>(sub(x, vm)));
      store(s + t, p);
      sum = _mm512_add_ps(sum, p);
    }
    return _mm512_reduce_add_ps(sum);
  }
  static float exp1(float x) { return _mm512_cvtss_f32(exp_nonpos<V, Ops512>(set1(x))); }
};

}  // namespace

namespace cs {
void block_update_avx512(const BlockJob& job) { block_entry<Ops512>(job); }
}  // namespace cs
