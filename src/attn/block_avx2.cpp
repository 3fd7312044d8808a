// AVX2 block kernel: 8-wide fp32 FMAs, F16C for fp16 K/V.
#include <immintrin.h>

#include "attn/exp_impl.h"
#include "attn/block_impl.h"

namespace {

struct Ops256 {
  using V = __m256;
  static constexpr int kWidth = 8;
  // 16 registers: 6 rows x 2 vectors = 12 accumulators, 2 for K^T or V, one
  // broadcast; 8 loads feed 12 FMAs (4 rows x 2 was load-bound; figures in
  // docs/kernels.md, "Measurements behind the kernels' constants"). One or
  // two rows take 8 or 4 vectors per row instead, so 8 FMA chains stay in
  // flight.
  using Many = Shape<6, 2, 6, 16>;
  using One = Shape<1, 8, 1, 64>;
  using Two = Shape<2, 4, 2, 32>;
  static constexpr int kFewRows = 2;
  // fp16/bf16 K/V are widened in registers by every row block, never into a
  // shared fp32 copy: on AVX2 hosts the conversions issue beside the FMAs,
  // and the copy's first row block stalls on K/V lines arriving from L2/DRAM
  // (measured slower: docs/kernels.md).
  static constexpr int kWidenRows = 1 << 30;
  // The next chunk's prefetches go out in the first half of this chunk's
  // steps: spread over all of them, K/V arrive late; much denser, the core
  // drops some requests (docs/kernels.md).
  static constexpr int kPrefetchFront = 2;
  // One-row jobs (decode of a model without GQA, phase two's private chunks)
  // issue no prefetches: a row's few FLOPs per chunk leave too little time
  // to space them, and the hardware prefetcher streams the chunk faster.
  // From two rows on they pay (both measured: docs/kernels.md).
  static constexpr int kPrefetchMinRows = 2;
  // Row blocks of 4+ rows ask the prefetch pacer once per 8 steps, not every
  // step (block_impl.h, prefetch_group).
  static constexpr int kPrefetchGroup = 8;
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
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p * 2^n, n integral, built from exponent bits: n below -126 is raised to
  // -127, whose bits are those of +0 (results under 2^-126 flush to 0).
  static V scale_pow2(V p, V n) {
    n = max(n, set1(-127.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V abs(V a) { return _mm256_andnot_ps(set1(-0.0f), a); }
  // |mag| with the sign of sgn (mag is not negative here).
  static V copysign(V mag, V sgn) { return _mm256_or_ps(mag, _mm256_and_ps(sgn, set1(-0.0f))); }
  // key == -inf ? 0 : a: the rescale factor of an empty state (m = -inf) is 0.
  static V zero_where_neginf(V a, V key) {
    return _mm256_and_ps(_mm256_cmp_ps(key, set1(kNegInf), _CMP_NEQ_OQ), a);
  }
  // Transpose-reduction of 8 row vectors fed in kRowOrder: lane i of the
  // result is op over all lanes of row i.
  static constexpr int kRowOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  template <class F>
  static V reduce_rows(const V* v, F op) {
    V z[4], p[2];
    for (int i = 0; i < 4; ++i)
      z[i] = op(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20), _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    for (int i = 0; i < 2; ++i)
      p[i] = op(_mm256_shuffle_ps(z[2 * i], z[2 * i + 1], 0x44), _mm256_shuffle_ps(z[2 * i], z[2 * i + 1], 0xEE));
    return op(_mm256_shuffle_ps(p[0], p[1], 0x88), _mm256_shuffle_ps(p[0], p[1], 0xDD));
  }
};

// Ops256 with the shared fp32 copy switched on (for tests only).
struct Ops256SharedCopy : Ops256 {
  static constexpr int kWidenRows = 5;
};

}  // namespace

namespace cs {
void block_update_avx2(const BlockJob& job) { block_entry<Ops256>(job); }
void block_update_avx2_shared_copy(const BlockJob& job) { block_entry<Ops256SharedCopy>(job); }
}  // namespace cs
