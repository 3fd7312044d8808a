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
  // 32 registers: 6 rows x 4 vectors = 24 accumulators for either GEMM;
  // one row still has 4 independent chains, so no separate few-row shape.
  using Many = Shape<6, 4, 6, 64>;
  using One = Many;
  using Two = Many;
  static constexpr int kFewRows = 0;
  // From this many rows on, fp16/bf16 K/V are widened once into a shared fp32
  // copy (block_impl): vcvtph2ps takes the FMA ports here, so one conversion
  // per element beats one per row block.
  static constexpr int kWidenRows = 5;
  // The next chunk's prefetches are spread over all of this chunk's steps
  // (front-loading them was slower on the Intel host: docs/kernels.md).
  static constexpr int kPrefetchFront = 1;
  // Every job prefetches: the AVX2 finding that one-row jobs run faster
  // without has not been measured on an AVX-512 host.
  static constexpr int kPrefetchMinRows = 1;
  // The pacer is asked every step (AVX2 asks every 8: not measured here).
  static constexpr int kPrefetchGroup = 1;
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
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p * 2^n in one instruction, n integral: rounds to a subnormal or +0
  // when n is very negative (no penalty for subnormal results here).
  static V scale_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V abs(V a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }
  // |mag| with the sign of sgn (mag is not negative here).
  static V copysign(V mag, V sgn) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(sgn), _mm512_set1_epi32(int(0x80000000u)));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(mag), sign));
  }
  // key == -inf ? 0 : a: the rescale factor of an empty state (m = -inf) is 0.
  static V zero_where_neginf(V a, V key) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(key, set1(kNegInf), _CMP_NEQ_OQ), a);
  }
  // Transpose-reduction of 16 row vectors fed in kRowOrder: lane i of the
  // result is op over all lanes of row i. Four shuffle levels serve 16 rows.
  static constexpr int kRowOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  template <class F>
  static V reduce_rows(const V* v, F op) {
    V z[8], w[4], p[2];
    for (int i = 0; i < 8; ++i)
      z[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)
      w[i] = op(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0x88), _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i)
      p[i] = op(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44), _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
    return op(_mm512_shuffle_ps(p[0], p[1], 0x88), _mm512_shuffle_ps(p[0], p[1], 0xDD));
  }
};

}  // namespace

namespace cs {
void block_update_avx512(const BlockJob& job) { block_entry<Ops512>(job); }
}  // namespace cs
