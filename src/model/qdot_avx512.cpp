// AVX-512 VNNI instantiation of the block-dot kernel (vpdpbusd on 256-bit
// vectors, which needs AVX512VL + AVX512VNNI). Compiled with AVX-512 flags;
// called only when cpu_isa() says the CPU has them.
#include "model/qdot_impl.h"

namespace {
struct Avx512Ops {
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
  static __m256i dot_s8s8(__m256i w, __m256i x) {
    // vpdpbusd wants an unsigned operand: use |w| and move w's sign onto x.
    const __mmask32 neg = _mm256_movepi8_mask(w);
    const __m256i xs = _mm256_mask_sub_epi8(x, neg, _mm256_setzero_si256(), x);
    return dot_u8s8(_mm256_abs_epi8(w), xs);
  }
};
}  // namespace

namespace cs {
void qdot_avx512(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
                 const BlockQ8* acts, int nb, int n_tok, float* y, int ldy) {
  qdot<Avx512Ops>(type, rows, row_bytes, n_rows, acts, nb, n_tok, y, ldy);
}
}  // namespace cs
