// Integer block-dot kernel shared by the AVX2 and AVX-512 translation units.
// Included only by qdot_avx2.cpp / qdot_avx512.cpp, each of which supplies
// `Ops` (its 32-byte unsigned x signed int8 dot product) and is compiled with
// its own target flags. Everything here is in an anonymous namespace of the
// including file, so no inline code compiled for AVX-512 can leak into the
// rest of the program through the linker.
//
// Per block of 32: sum_j w_j * x_j = dw * dx * sum_j q_j * p_j (+ m * s for Q4_1,
// -8 * dw * s for Q4_0, where s = dx * sum_j p_j).
#include <immintrin.h>

#include "model/ggml_types.h"
#include "model/pack_layout.h"

namespace {

using cs::BlockQ8;
using cs::MinWeights;
using cs::min_weights;
using cs::GgmlType;

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Activation bytes 8k..8k+3 and 8k+4..8k+7 of a block as two 32-bit words:
// the repacked Q4 kernels broadcast them against the low and high nibbles.
struct ActWords {
  int lo, hi;
};
inline ActWords act_words(const BlockQ8& a, int k) {
  ActWords w;
  __builtin_memcpy(&w.lo, a.qs + 8 * k, 4);
  __builtin_memcpy(&w.hi, a.qs + 8 * k + 4, 4);
  return w;
}

// An activation block's integer sum per half the Q8 layouts scale apart
// (kHalves 1: the whole block).
struct HalfSums {
  int sum[2];
};
template <int kHalves>
inline HalfSums half_sums(const BlockQ8& a) {
  if (kHalves == 1) return {{a.sum, 0}};
  return {{a.sum_lo, a.sum - a.sum_lo}};
}

// A K layout's value bytes from one nibble vector and its high plane
// (KLayout): vector k's low (lo) or high nibbles with their high bits moved
// to bit 4 (and 5). Shifts run on 16-bit lanes; the mask keeps only bits
// that came from the same byte.
template <int kPlanes, bool kHigh>
constexpr int plane_shift(int k) {
  if (kPlanes == 1) return 4 - (2 * k + (kHigh ? 1 : 0));
  return 4 - (4 * (k % 2) + (kHigh ? 2 : 0));
}
constexpr char plane_mask(int planes) { return planes == 1 ? 0x10 : 0x30; }

// Asks for a block of the weights ahead of block w (block_words words each)
// into L1. The hardware prefetchers alone leave a decode step's stream of
// repacked weights below the read bandwidth it reaches with this
// (docs/kernels.md). One or two tokens (T), which stream the weights once
// (a decode step; the head's two levels on flat logits), ask for the block
// about kStreamAheadBytes ahead: 4 blocks (1.1-2 KB: the layouts' blocks run
// from 272 to 512 bytes) left a core's stream short of what 4 KB reaches
// (docs/benchmarks.md, "Prefetch distance"). More tokens run a
// group's blocks once per tile of tokens, from cache after the first, and
// are compute-bound: they keep 4 blocks (4 KB showed them no gain within
// this host's noise). Prefetches past the end of a group are harmless.
constexpr int kPrefetchBlocks = 4, kStreamAheadBytes = 4096;
template <int T>
inline void prefetch_ahead(const uint32_t* w, int block_words) {
  const int bytes = 4 * block_words;
  const int blocks = T <= 2 ? (kStreamAheadBytes + bytes - 1) / bytes : kPrefetchBlocks;
  const char* ahead = reinterpret_cast<const char*>(w + blocks * block_words);
  for (int i = 0; i < bytes; i += 64) _mm_prefetch(ahead + i, _MM_HINT_T0);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// T token rows at once share one unpacked weight block.
template <class Ops, int T>
void q4_row(GgmlType type, const uint8_t* row, const BlockQ8* acts, int nb, float* y, int ldy) {
  __m256 acc[T];
  float off[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), off[t] = 0;
  const bool q41 = type == GgmlType::Q4_1;
  const size_t bs = q41 ? sizeof(cs::BlockQ4_1) : sizeof(cs::BlockQ4_0);
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = row + size_t(b) * bs;
    uint16_t dh, mh = 0;
    __builtin_memcpy(&dh, blk, 2);
    if (q41) __builtin_memcpy(&mh, blk + 2, 2);
    const float dw = h2f(dh);
    const float mw = q41 ? h2f(mh) : -8.0f * dw;
    const __m256i w = unpack_nibbles(blk + (q41 ? 4 : 2));
    for (int t = 0; t < T; ++t) {
      const BlockQ8& a = acts[size_t(t) * nb + b];
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      const __m256 p = _mm256_cvtepi32_ps(Ops::dot_u8s8(w, x));
      acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * a.d), acc[t]);
      off[t] += mw * a.s;
    }
  }
  for (int t = 0; t < T; ++t) y[size_t(t) * ldy] = hsum(acc[t]) + off[t];
}

template <class Ops, int T>
void q8_row(const uint8_t* row, const BlockQ8* acts, int nb, float* y, int ldy) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = row + size_t(b) * sizeof(cs::BlockQ8_0);
    uint16_t dh;
    __builtin_memcpy(&dh, blk, 2);
    const float dw = h2f(dh);
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    for (int t = 0; t < T; ++t) {
      const BlockQ8& a = acts[size_t(t) * nb + b];
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      const __m256 p = _mm256_cvtepi32_ps(Ops::dot_s8s8(w, x));
      acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * a.d), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[size_t(t) * ldy] = hsum(acc[t]);
}

template <class Ops, int T>
void row_tile(GgmlType type, const uint8_t* row, const BlockQ8* acts, int nb, float* y, int ldy) {
  if (type == GgmlType::Q8_0)
    q8_row<Ops, T>(row, acts, nb, y, ldy);
  else
    q4_row<Ops, T>(type, row, acts, nb, y, ldy);
}

template <class Ops>
void qdot(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows, const BlockQ8* acts,
          int nb, int n_tok, float* y, int ldy) {
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows + size_t(r) * row_bytes;
    int t = 0;
    for (; t + 4 <= n_tok; t += 4)
      row_tile<Ops, 4>(type, row, acts + size_t(t) * nb, nb, y + size_t(t) * ldy + r, ldy);
    switch (n_tok - t) {
      case 3: row_tile<Ops, 3>(type, row, acts + size_t(t) * nb, nb, y + size_t(t) * ldy + r, ldy); break;
      case 2: row_tile<Ops, 2>(type, row, acts + size_t(t) * nb, nb, y + size_t(t) * ldy + r, ldy); break;
      case 1: row_tile<Ops, 1>(type, row, acts + size_t(t) * nb, nb, y + size_t(t) * ldy + r, ldy); break;
      default: break;
    }
  }
}

}  // namespace
