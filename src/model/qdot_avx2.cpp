// AVX2 kernels: the block-dot kernel on the file's layout (maddubs + madd)
// and the 16-row kernels on repacked weights.
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

// Stores T accumulators (token t's 8 rows at y + t * ldy), n_rows of 8 real.
inline void store_rows(const __m256* acc, int T, int n_rows, float* y, int ldy) {
  for (int t = 0; t < T; ++t) {
    if (n_rows == 8) {
      _mm256_storeu_ps(y + size_t(t) * ldy, acc[t]);
      continue;
    }
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, acc[t]);
    for (int r = 0; r < n_rows; ++r) y[size_t(t) * ldy + r] = tmp[r];
  }
}

// NH halves of T accumulators; n_rows counts rows from the first half's.
template <int T, int NH>
inline void store_halves(const __m256 (*acc)[T], int n_rows, float* y, int ldy) {
  for (int h = 0; h < NH; ++h) store_rows(acc[h], T, n_rows - 8 * h < 8 ? n_rows - 8 * h : 8, y + 8 * h, ldy);
}

// The 16-row kernels on repacked weights (Weight::packed; the layout the
// AVX-512 kernels read), as 8-row halves of 256 bits: NH halves from `half`
// on in one pass over the blocks (n_rows counts rows from 8 * half). Without
// VNNI the int8 products are vpmaddubsw pairs: for Q4 a 16-bit lane gathers
// at most 8 of them per block (8 x 2 x 15 x 127 = 30480 < 2^15), so the
// block's integer sum is widened to 32 bits once (vpmaddwd) instead of per 4
// elements. Integer sums are exact and the float steps are those of the
// AVX-512 kernels, so both give the same bits; a row's steps do not depend
// on NH or T either.
template <int T, int NH>
void q4x8(const uint32_t* group, int half, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::kPackBlockWords + 8 * half;
    prefetch_ahead<T>(w, cs::kPackBlockWords);
    __m256i s16[NH][T];
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) s16[h][t] = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      __m256i lo[NH], hi[NH];
      for (int h = 0; h < NH; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8 * h + 32 + 16 * k));
        lo[h] = _mm256_and_si256(v, low);
        hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      }
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        const __m256i xl = _mm256_set1_epi32(x.lo), xh = _mm256_set1_epi32(x.hi);
        for (int h = 0; h < NH; ++h)
          s16[h][t] = _mm256_add_epi16(s16[h][t], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xl),
                                                                   _mm256_maddubs_epi16(hi[h], xh)));
      }
    }
    for (int h = 0; h < NH; ++h) {
      const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 8 * h));
      const __m256 m = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 8 * h + 16));
      for (int t = 0; t < T; ++t) {
        const cs::BlockQ8& a = acts[size_t(t) * nb + b];
        const __m256i isum = _mm256_madd_epi16(s16[h][t], _mm256_set1_epi16(1));
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(a.d)), acc[h][t]);
        acc[h][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s), acc[h][t]);
      }
    }
  }
  store_halves<T, NH>(acc, n_rows, y, ldy);
}

// The Q8 layouts (L; stored + 128): the xor gives back the signed weight,
// and vpmaddubsw takes |w| with w's sign moved onto x (pairs <= 2 x 128 x
// 127). Integer sums per half of the block where L scales halves apart.
template <cs::PackLayout L, int T, int NH>
void q8x8(const uint32_t* group, int half, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  constexpr int kScales = cs::q8_scale_words(L), kMins = cs::q8_min_words(L), kHalves = kScales / 16;
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i bias = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::pack_block_words(L) + 8 * half;
    prefetch_ahead<T>(w, cs::pack_block_words(L));
    __m256i isum[NH][T][kHalves];
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t)
        for (int s = 0; s < kHalves; ++s) isum[h][t][s] = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      __m256i v[NH], mag[NH];
      for (int h = 0; h < NH; ++h) {
        v[h] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8 * h + kScales + kMins + 16 * k)), bias);
        mag[h] = _mm256_abs_epi8(v[h]);
      }
      for (int t = 0; t < T; ++t) {
        int x;
        __builtin_memcpy(&x, acts[size_t(t) * nb + b].qs + 4 * k, 4);
        const __m256i xb = _mm256_set1_epi32(x);
        for (int h = 0; h < NH; ++h) {
          __m256i& s = isum[h][t][k * kHalves / 8];
          s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(mag[h], _mm256_sign_epi8(xb, v[h])), ones));
        }
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const cs::BlockQ8& a = acts[size_t(t) * nb + b];
        const __m256 ad = _mm256_set1_ps(a.d);
        for (int s = 0; s < kHalves; ++s)
          acc[h][t] = _mm256_fmadd_ps(
              _mm256_cvtepi32_ps(isum[h][t][s]),
              _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(w + 8 * h + 16 * s)), ad), acc[h][t]);
        const MinWeights mw = min_weights<L>(a);
        for (int s = 0; s < kMins / 16; ++s)
          acc[h][t] = _mm256_fmadd_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(w + 8 * h + kScales + 16 * s)),
                                      _mm256_set1_ps(mw.s[s]), acc[h][t]);
      }
  }
  store_halves<T, NH>(acc, n_rows, y, ldy);
}

template <int kPlanes, bool kHigh>
inline __m256i with_plane(__m256i nib, const __m256i* planes, int k) {
  if (kPlanes == 0) return nib;
  const __m256i p = planes[kPlanes == 1 ? 0 : k / 2];
  const int sh = plane_shift<kPlanes, kHigh>(k);
  const __m256i moved = sh >= 0 ? _mm256_slli_epi16(p, sh) : _mm256_srli_epi16(p, -sh);
  return _mm256_or_si256(nib, _mm256_and_si256(moved, _mm256_set1_epi8(plane_mask(kPlanes))));
}

// Eight of the row factors of a K layout block (int8 at byte offset `at`) as floats.
inline __m256 factors8(const uint32_t* w, int at) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(w) + at))));
}

// The K layouts (L), as the AVX-512 kernel reads them. A value is at most
// 63, so a vpmaddubsw pair is at most 2 x 63 x 127 and the low and high
// nibbles' pairs together 32004 < 2^15: one vpmaddwd per vector k. The
// scales are built after the integer sums, which keeps the planes and sums
// of two halves in registers.
template <cs::PackLayout L, int T, int NH>
void kx8(const uint32_t* group, int half, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  constexpr cs::KLayout kl = cs::k_layout(L);
  constexpr int kHalves = kl.half_scales ? 2 : 1;
  constexpr int kPlaneVecs = kl.planes > 0 ? kl.planes : 1;
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* sup = group + size_t(b / 8) * cs::k_super_words(L);
    const uint32_t* w = sup + cs::k_header_words(L) + (b % 8) * cs::k_block_words(L);
    prefetch_ahead<T>(w, cs::k_block_words(L));
    __m256i planes[NH][kPlaneVecs];
    for (int h = 0; h < NH; ++h)
      for (int p = 0; p < kl.planes; ++p)
        planes[h][p] =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + cs::kKPlanes + 16 * p + 8 * (half + h)));
    __m256i isum[NH][T][kHalves];
    for (int t = 0; t < T; ++t) {
      const HalfSums hs = half_sums<kHalves>(acts[size_t(t) * nb + b]);
      for (int h = 0; h < NH; ++h)
        for (int s = 0; s < kHalves; ++s) isum[h][t][s] = _mm256_set1_epi32(-kl.offset * hs.sum[s]);
    }
    for (int k = 0; k < 4; ++k) {
      __m256i lo[NH], hi[NH];
      for (int h = 0; h < NH; ++h) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + cs::kKNibbles + 16 * k + 8 * (half + h)));
        lo[h] = with_plane<kl.planes, false>(_mm256_and_si256(v, low), planes[h], k);
        hi[h] = with_plane<kl.planes, true>(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), planes[h], k);
      }
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        const __m256i xl = _mm256_set1_epi32(x.lo), xh = _mm256_set1_epi32(x.hi);
        for (int h = 0; h < NH; ++h) {
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xl), _mm256_maddubs_epi16(hi[h], xh));
          __m256i& s = isum[h][t][k * kHalves / 4];
          s = _mm256_add_epi32(s, _mm256_madd_epi16(s16, ones));
        }
      }
    }
    for (int h = 0; h < NH; ++h) {
      const int hh = half + h;
      const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(sup + 8 * hh));
      __m256 scale[kHalves], mins = _mm256_setzero_ps();
      for (int s = 0; s < kHalves; ++s) scale[s] = _mm256_mul_ps(d, factors8(w, 16 * s + 8 * hh));
      if (kl.mins) mins = _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(sup + 16 + 8 * hh)),
                                        factors8(w, 16 + 8 * hh));
      for (int t = 0; t < T; ++t) {
        const cs::BlockQ8& a = acts[size_t(t) * nb + b];
        const __m256 ad = _mm256_set1_ps(a.d);
        for (int s = 0; s < kHalves; ++s)
          acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][t][s]), _mm256_mul_ps(scale[s], ad), acc[h][t]);
        if (kl.mins) acc[h][t] = _mm256_fmadd_ps(mins, _mm256_set1_ps(min_weights<L>(a).s[0]), acc[h][t]);
      }
    }
  }
  store_halves<T, NH>(acc, n_rows, y, ldy);
}

// MXFP4 (kMx), as the AVX-512 kernel reads it, 8 rows a half. A looked-up
// value is at most 24, so a vpmaddubsw pair is at most 2 x 24 x 127 and the
// low and high nibbles' pairs together 12192 < 2^15: one vpmaddwd per vector k.
template <int T, int NH>
void mx8(const uint32_t* group, int half, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cs::kMxBiased)));
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2), sub = _mm256_set1_epi32(0x00200000);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::kMxBlockWords;
    prefetch_ahead<T>(w, cs::kMxBlockWords);
    __m256i isum[NH][T];
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) isum[h][t] = _mm256_set1_epi32(-cs::kMxBias * acts[size_t(t) * nb + b].sum);
    for (int k = 0; k < 4; ++k) {
      __m256i lo[NH], hi[NH];
      for (int h = 0; h < NH; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 4 + 16 * k + 8 * (half + h)));
        lo[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
        hi[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
      }
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        const __m256i xl = _mm256_set1_epi32(x.lo), xh = _mm256_set1_epi32(x.hi);
        for (int h = 0; h < NH; ++h) {
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xl), _mm256_maddubs_epi16(hi[h], xh));
          isum[h][t] = _mm256_add_epi32(isum[h][t], _mm256_madd_epi16(s16, ones));
        }
      }
    }
    for (int h = 0; h < NH; ++h) {
      // cs::mx_scale_bits on 8 exponents: (e - 1) << 23, or 0x200000 << e below 2.
      const __m256i e = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(w) + 8 * (half + h))));
      const __m256i small = _mm256_cmpgt_epi32(two, e);
      const __m256i bits =
          _mm256_blendv_epi8(_mm256_slli_epi32(_mm256_sub_epi32(e, one), 23), _mm256_sllv_epi32(sub, e), small);
      const __m256 d = _mm256_castsi256_ps(bits);
      for (int t = 0; t < T; ++t)
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][t]),
                                    _mm256_mul_ps(d, _mm256_set1_ps(acts[size_t(t) * nb + b].d)), acc[h][t]);
    }
  }
  store_halves<T, NH>(acc, n_rows, y, ldy);
}

// IQ4_NL / IQ4_XS (kIq4), as the AVX-512 kernel reads it, 8 rows a half:
// the codes looked up as signed values (|value| <= 127), and vpmaddubsw
// takes |value| with its sign moved onto x, as the Q8 layout does (a pair
// at most 2 x 127 x 127 < 2^15; the low and high nibbles widened apart).
template <int T, int NH>
void iq8(const uint32_t* group, int half, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cs::kIq4Values)));
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::kIq4BlockWords;
    prefetch_ahead<T>(w, cs::kIq4BlockWords);
    __m256i isum[NH][T];
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) isum[h][t] = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      __m256i lo[NH], hi[NH], lo_mag[NH], hi_mag[NH];
      for (int h = 0; h < NH; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 16 * k + 8 * (half + h)));
        lo[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
        hi[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
        lo_mag[h] = _mm256_abs_epi8(lo[h]);
        hi_mag[h] = _mm256_abs_epi8(hi[h]);
      }
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        const __m256i xlb = _mm256_set1_epi32(x.lo), xhb = _mm256_set1_epi32(x.hi);
        for (int h = 0; h < NH; ++h) {
          const __m256i xl = _mm256_sign_epi8(xlb, lo[h]);
          const __m256i xh = _mm256_sign_epi8(xhb, hi[h]);
          isum[h][t] =
              _mm256_add_epi32(isum[h][t], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo_mag[h], xl), ones),
                                                            _mm256_madd_epi16(_mm256_maddubs_epi16(hi_mag[h], xh), ones)));
        }
      }
    }
    for (int h = 0; h < NH; ++h) {
      const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 8 * (half + h)));
      for (int t = 0; t < T; ++t)
        acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][t]),
                                    _mm256_mul_ps(d, _mm256_set1_ps(acts[size_t(t) * nb + b].d)), acc[h][t]);
    }
  }
  store_halves<T, NH>(acc, n_rows, y, ldy);
}

// A 16-row group. One or two tokens (a decode step; the output head's two
// levels of one; the last of a batch) run both halves in one pass over the
// blocks, so each line of weights is used whole when it arrives: run a half
// at a time, the second pass found the group in cache and the bus idle
// behind it. More tokens share each unpacked half four (or three) at a time,
// compute-bound, where both halves at once would not fit 16 registers.
template <template <int, int> class K, int T>
void both_halves(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  if (n_rows > 8) K<T, 2>::run(group, 0, nb, n_rows, acts, y, ldy);
  else K<T, 1>::run(group, 0, nb, n_rows, acts, y, ldy);
}
template <template <int, int> class K>
void over_group(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, int n_tok, float* y, int ldy) {
  const int rest = n_tok % 4 == 3 ? 0 : n_tok % 4;  // the last tokens, both halves at once
  const int by_half = n_tok - rest;
  for (int half = 0; half < 2 && 8 * half < n_rows && by_half > 0; ++half) {
    const int nr = n_rows - 8 * half;
    float* yh = y + 8 * half;
    int t = 0;
    for (; t + 4 <= by_half; t += 4) K<4, 1>::run(group, half, nb, nr, acts + size_t(t) * nb, yh + size_t(t) * ldy, ldy);
    if (t < by_half) K<3, 1>::run(group, half, nb, nr, acts + size_t(t) * nb, yh + size_t(t) * ldy, ldy);
  }
  const size_t t = size_t(by_half);
  if (rest == 1) both_halves<K, 1>(group, nb, n_rows, acts + t * nb, y + t * ldy, ldy);
  if (rest == 2) both_halves<K, 2>(group, nb, n_rows, acts + t * nb, y + t * ldy, ldy);
}
template <int T, int NH>
struct Q4K {
  static void run(const uint32_t* g, int h, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) {
    q4x8<T, NH>(g, h, nb, nr, a, y, ldy);
  }
};
template <int T, int NH>
struct IqK {
  static void run(const uint32_t* g, int h, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) {
    iq8<T, NH>(g, h, nb, nr, a, y, ldy);
  }
};
template <int T, int NH>
struct MxK {
  static void run(const uint32_t* g, int h, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) {
    mx8<T, NH>(g, h, nb, nr, a, y, ldy);
  }
};
// The kernel of layout L (a Q8 or a K layout) with T tokens and NH halves.
template <cs::PackLayout L>
struct Layout {
  template <int T, int NH>
  struct K {
    static void run(const uint32_t* g, int h, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) {
      if constexpr (cs::is_k_layout(L))
        kx8<L, T, NH>(g, h, nb, nr, a, y, ldy);
      else
        q8x8<L, T, NH>(g, h, nb, nr, a, y, ldy);
    }
  };
};
}  // namespace

namespace cs {
void qdot16_avx2(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy) {
  over_group<Q4K>(group, nb, n_rows, acts, n_tok, y, ldy);
}

void qdot16q8_avx2(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                   float* y, int ldy) {
  switch (layout) {
    case PackLayout::kQ4K: return over_group<Layout<PackLayout::kQ4K>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ5K: return over_group<Layout<PackLayout::kQ5K>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ6K: return over_group<Layout<PackLayout::kQ6K>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Min: return over_group<Layout<PackLayout::kQ8Min>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Half: return over_group<Layout<PackLayout::kQ8Half>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8HalfMin:
      return over_group<Layout<PackLayout::kQ8HalfMin>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kMx: return over_group<MxK>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kIq4: return over_group<IqK>(group, nb, n_rows, acts, n_tok, y, ldy);
    default: return over_group<Layout<PackLayout::kQ8>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
  }
}

void qdot_avx2(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
               const BlockQ8* acts, int nb, int n_tok, float* y, int ldy) {
  qdot<Avx2Ops>(type, rows, row_bytes, n_rows, acts, nb, n_tok, y, ldy);
}
}  // namespace cs
