// AVX2 instantiation of the block-dot kernel (maddubs + madd).
#include "model/qdot_impl.h"

namespace {
struct Avx2Ops {
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    // Pairwise u8*s8 sums fit in int16 here: u <= 15 (nibbles) or <= 128 (|q8|).
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static __m256i dot_s8s8(__m256i w, __m256i x) {
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
};
}  // namespace

namespace cs {
void qdot_avx2(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
               const BlockQ8* acts, int nb, int n_tok, float* y, int ldy) {
  qdot<Avx2Ops>(type, rows, row_bytes, n_rows, acts, nb, n_tok, y, ldy);
}
}  // namespace cs
