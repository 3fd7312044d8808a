// AVX-512 VNNI kernels: the block-dot kernel on the file's layout (vpdpbusd on
// 256-bit vectors, AVX512VL + AVX512VNNI) and the 16-row kernel on repacked
// Q4 weights (512-bit vpdpbusd, one per 16 rows x 4 elements). Compiled with AVX-512 flags;
// called only when cpu_isa() says the CPU has them.
#include "model/qdot_impl.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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

// The repacked kernel: T tokens share each unpacked weight vector.
template <int T>
void q4x16(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::kPackBlockWords;
    prefetch_ahead<T>(w, cs::kPackBlockWords);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_loadu_si512(w + 32 + 16 * k);
      const __m512i lo = _mm512_and_si512(v, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        isum[t] = _mm512_dpbusd_epi32(isum[t], lo, _mm512_set1_epi32(x.lo));
        isum[t] = _mm512_dpbusd_epi32(isum[t], hi, _mm512_set1_epi32(x.hi));
      }
    }
    const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(w));
    const __m512 m = _mm512_loadu_ps(reinterpret_cast<const float*>(w + 16));
    for (int t = 0; t < T; ++t) {
      const cs::BlockQ8& a = acts[size_t(t) * nb + b];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(a.d)), acc[t]);
      acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(a.s), acc[t]);
    }
  }
  const __mmask16 rows = __mmask16((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + size_t(t) * ldy, rows, acc[t]);
}

// The Q8 layouts (L): weights stored + 128 as unsigned bytes, so
// sum (w + 128) x - 128 sum x = sum w x, all exact in int32, per half of the
// block where the layout scales halves apart.
template <cs::PackLayout L, int T>
void q8x16(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  constexpr int kScales = cs::q8_scale_words(L), kMins = cs::q8_min_words(L), kHalves = kScales / 16;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * cs::pack_block_words(L);
    prefetch_ahead<T>(w, cs::pack_block_words(L));
    __m512i isum[T][kHalves];
    for (int t = 0; t < T; ++t) {
      const cs::BlockQ8& a = acts[size_t(t) * nb + b];
      const HalfSums hs = half_sums<kHalves>(a);
      for (int h = 0; h < kHalves; ++h) isum[t][h] = _mm512_set1_epi32(-128 * hs.sum[h]);
    }
    for (int k = 0; k < 8; ++k) {
      const __m512i v = _mm512_loadu_si512(w + kScales + kMins + 16 * k);
      for (int t = 0; t < T; ++t) {
        int x;
        __builtin_memcpy(&x, acts[size_t(t) * nb + b].qs + 4 * k, 4);
        __m512i& s = isum[t][k * kHalves / 8];
        s = _mm512_dpbusd_epi32(s, v, _mm512_set1_epi32(x));
      }
    }
    for (int t = 0; t < T; ++t) {
      const cs::BlockQ8& a = acts[size_t(t) * nb + b];
      const __m512 ad = _mm512_set1_ps(a.d);
      for (int h = 0; h < kHalves; ++h)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][h]),
                                 _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(w + 16 * h)), ad), acc[t]);
      const MinWeights mw = min_weights<L>(a);
      for (int h = 0; h < kMins / 16; ++h)
        acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(w + kScales + 16 * h)),
                                 _mm512_set1_ps(mw.s[h]), acc[t]);
    }
  }
  const __mmask16 rows = __mmask16((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + size_t(t) * ldy, rows, acc[t]);
}

// The looked-up layouts: nibble codes turned into unsigned values by a byte
// shuffle (the grid plus a bias, so vpdpbusd can take them; bias * sum comes
// back out of the exact integer dot), then dot * (scale * dx), the Q8
// layout's float steps, so both give the bits the byte layouts gave.
// MXFP4 (kMx): grid + 12; the 16 rows' scales built from their E8M0 exponent
// bytes, cs::mx_scale_bits on 16 lanes: (e - 1) << 23, or 0x200000 << e below 2.
struct MxLut {
  static constexpr int kWords = cs::kMxBlockWords, kNibbles = 4, kBias = cs::kMxBias;
  static const uint8_t* table() { return cs::kMxBiased; }
  static __m512 scales(const uint32_t* w) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2), sub = _mm512_set1_epi32(0x00200000);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, two),
                                                       _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23),
                                                       _mm512_sllv_epi32(sub, e)));
  }
};
// IQ4_NL / IQ4_XS (kIq4): grid + 128 (1..241; vpdpbusd does not saturate);
// the rows' fp32 scales as stored.
struct Iq4Lut {
  static constexpr int kWords = cs::kIq4BlockWords, kNibbles = 16, kBias = cs::kIq4Bias;
  static const uint8_t* table() { return cs::kIq4Biased; }
  static __m512 scales(const uint32_t* w) { return _mm512_loadu_ps(reinterpret_cast<const float*>(w)); }
};

template <class Lut, int T>
void lut16(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Lut::table())));
  for (int b = 0; b < nb; ++b) {
    const uint32_t* w = group + size_t(b) * Lut::kWords;
    prefetch_ahead<T>(w, Lut::kWords);
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_set1_epi32(-Lut::kBias * acts[size_t(t) * nb + b].sum);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_loadu_si512(w + Lut::kNibbles + 16 * k);
      const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
      const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        isum[t] = _mm512_dpbusd_epi32(isum[t], lo, _mm512_set1_epi32(x.lo));
        isum[t] = _mm512_dpbusd_epi32(isum[t], hi, _mm512_set1_epi32(x.hi));
      }
    }
    const __m512 d = Lut::scales(w);
    for (int t = 0; t < T; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(acts[size_t(t) * nb + b].d)),
                               acc[t]);
  }
  const __mmask16 rows = __mmask16((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + size_t(t) * ldy, rows, acc[t]);
}

template <int kPlanes, bool kHigh>
inline __m512i with_plane(__m512i nib, const __m512i* planes, int k) {
  if (kPlanes == 0) return nib;
  const __m512i p = planes[kPlanes == 1 ? 0 : k / 2];
  const int sh = plane_shift<kPlanes, kHigh>(k);
  const __m512i moved = sh > 0 ? _mm512_slli_epi16(p, unsigned(sh)) : sh < 0 ? _mm512_srli_epi16(p, unsigned(-sh)) : p;
  return _mm512_ternarylogic_epi32(nib, moved, _mm512_set1_epi8(plane_mask(kPlanes)), 0xF8);  // nib | (moved & mask)
}

// The K layouts (L): per super-block the rows' d (and dmin), per block the
// scales d * sc as Block32's, exact; values q + offset (nibble and high
// planes), the offset taken back out of the exact int32 sums as the Q8
// layouts take 128.
template <cs::PackLayout L, int T>
void kx16(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  constexpr cs::KLayout kl = cs::k_layout(L);
  constexpr int kHalves = kl.half_scales ? 2 : 1;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int b = 0; b < nb; ++b) {
    const uint32_t* sup = group + size_t(b / 8) * cs::k_super_words(L);
    const uint32_t* w = sup + cs::k_header_words(L) + (b % 8) * cs::k_block_words(L);
    prefetch_ahead<T>(w, cs::k_block_words(L));
    const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(sup));
    __m512 scale[2], mins;
    for (int h = 0; h < kHalves; ++h)
      scale[h] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(w + 4 * h)))));
    if (kl.mins)
      mins = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(sup + 16)),
                           _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                               reinterpret_cast<const __m128i*>(w + 4)))));
    __m512i planes[2];
    for (int p = 0; p < kl.planes; ++p) planes[p] = _mm512_loadu_si512(w + cs::kKPlanes + 16 * p);
    __m512i isum[T][kHalves];
    for (int t = 0; t < T; ++t) {
      const HalfSums hs = half_sums<kHalves>(acts[size_t(t) * nb + b]);
      for (int h = 0; h < kHalves; ++h) isum[t][h] = _mm512_set1_epi32(-kl.offset * hs.sum[h]);
    }
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_loadu_si512(w + cs::kKNibbles + 16 * k);
      const __m512i lo = with_plane<kl.planes, false>(_mm512_and_si512(v, low), planes, k);
      const __m512i hi = with_plane<kl.planes, true>(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), planes, k);
      for (int t = 0; t < T; ++t) {
        const ActWords x = act_words(acts[size_t(t) * nb + b], k);
        __m512i& s = isum[t][k * kHalves / 4];
        s = _mm512_dpbusd_epi32(s, lo, _mm512_set1_epi32(x.lo));
        s = _mm512_dpbusd_epi32(s, hi, _mm512_set1_epi32(x.hi));
      }
    }
    for (int t = 0; t < T; ++t) {
      const cs::BlockQ8& a = acts[size_t(t) * nb + b];
      const __m512 ad = _mm512_set1_ps(a.d);
      for (int h = 0; h < kHalves; ++h)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t][h]), _mm512_mul_ps(scale[h], ad), acc[t]);
      if (kl.mins) acc[t] = _mm512_fmadd_ps(mins, _mm512_set1_ps(min_weights<L>(a).s[0]), acc[t]);
    }
  }
  const __mmask16 rows = __mmask16((1u << n_rows) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + size_t(t) * ldy, rows, acc[t]);
}

// K's instantiation for n tokens (1 <= n <= N).
template <template <int> class K, int N>
void run_tokens(int n, const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, float* y, int ldy) {
  if constexpr (N > 1) {
    if (n < N) return run_tokens<K, N - 1>(n, group, nb, n_rows, acts, y, ldy);
  }
  K<N>::run(group, nb, n_rows, acts, y, ldy);
}

// Runs K (a q4x16, q8x16, kx16 or lut16 instantiation) over the tokens in
// ceil(n_tok / kTile) tiles of nearly equal size: each unpacked weight vector
// serves a tile's tokens, at most kTile (as many as the accumulators and the
// unpacking's registers leave room for). Even tiles, not kTile-sized ones and
// a remainder: a draft step's 9 rows run as 5 + 4, not 8 + 1, as a tile of
// one token unpacks every weight vector for one use. Each token's sums are
// its own, so the tiling changes no bit.
template <template <int> class K, int kTile = 4>
void over_tokens(const uint32_t* group, int nb, int n_rows, const cs::BlockQ8* acts, int n_tok, float* y,
                 int ldy) {
  if (n_tok <= 0) return;
  const int tiles = (n_tok + kTile - 1) / kTile, base = n_tok / tiles, extra = n_tok % tiles;
  for (int i = 0, t = 0; i < tiles; t += base + (i < extra), ++i)
    run_tokens<K, kTile>(base + (i < extra), group, nb, n_rows, acts + size_t(t) * nb, y + size_t(t) * ldy, ldy);
}
template <int T>
struct Q4K {
  static void run(const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) { q4x16<T>(g, nb, nr, a, y, ldy); }
};
template <int T>
struct IqK {
  static void run(const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) { lut16<Iq4Lut, T>(g, nb, nr, a, y, ldy); }
};
template <int T>
struct MxK {
  static void run(const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) { lut16<MxLut, T>(g, nb, nr, a, y, ldy); }
};
// The kernel of layout L (a Q8 or a K layout) with T tokens.
template <cs::PackLayout L>
struct Layout {
  template <int T>
  struct K {
    static void run(const uint32_t* g, int nb, int nr, const cs::BlockQ8* a, float* y, int ldy) {
      if constexpr (cs::is_k_layout(L))
        kx16<L, T>(g, nb, nr, a, y, ldy);
      else
        q8x16<L, T>(g, nb, nr, a, y, ldy);
    }
  };
};

}  // namespace

namespace cs {
void qdot16q8_avx512(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                     float* y, int ldy) {
  switch (layout) {
    case PackLayout::kQ4K: return over_tokens<Layout<PackLayout::kQ4K>::K, 8>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ5K: return over_tokens<Layout<PackLayout::kQ5K>::K, 8>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ6K: return over_tokens<Layout<PackLayout::kQ6K>::K, 6>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Min: return over_tokens<Layout<PackLayout::kQ8Min>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Half: return over_tokens<Layout<PackLayout::kQ8Half>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8HalfMin:
      return over_tokens<Layout<PackLayout::kQ8HalfMin>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kMx: return over_tokens<MxK, 8>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kIq4: return over_tokens<IqK, 8>(group, nb, n_rows, acts, n_tok, y, ldy);
    default: return over_tokens<Layout<PackLayout::kQ8>::K>(group, nb, n_rows, acts, n_tok, y, ldy);
  }
}

void qdot16_avx512(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y,
                   int ldy) {
  over_tokens<Q4K, 8>(group, nb, n_rows, acts, n_tok, y, ldy);
}

void qdot_avx512(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
                 const BlockQ8* acts, int nb, int n_tok, float* y, int ldy) {
  qdot<Avx512Ops>(type, rows, row_bytes, n_rows, acts, nb, n_tok, y, ldy);
}
}  // namespace cs
