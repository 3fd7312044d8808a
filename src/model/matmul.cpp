#include "model/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/cpu.h"
#include "base/error.h"
#include "base/f16.h"

namespace cs {

namespace {

// Lays rows out in groups of kPackRows: calls fill(words, lane, row, block)
// for every row and block, `words` being that group's block of block_words.
template <class Fill>
PackedWords pack_rows(int64_t rows, int64_t cols, int block_words, Fill fill) {
  const int nb = int(cols / kQBlock);
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  PackedWords out(size_t(groups) * nb * block_words, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < nb; ++b)
      fill(out.data() + (size_t(r / kPackRows) * nb + b) * block_words, int(r % kPackRows), r, b);
  return out;
}

// Fills one row's block of a repacked group from 32 integers and their
// affine maps: the Q4 layout (q 0..15, scale and minimum) or a Q8 layout
// (scales and minimums per block or per half, then q + 128 as bytes).
// The low nibbles of 32 values into a lane of 4 nibble vectors (the Q4 and
// K layouts' order: vector k holds values 8k..8k+3 low, 8k+4..8k+7 high).
void put_nibbles(uint32_t* nibbles, int lane, const int* q) {
  for (int k = 0; k < 4; ++k) {
    uint32_t word = 0;
    for (int i = 0; i < 4; ++i) word |= uint32_t((q[8 * k + i] & 0xF) | (q[8 * k + 4 + i] & 0xF) << 4) << (8 * i);
    nibbles[16 * k + lane] = word;
  }
}

void fill_q4(uint32_t* w, int lane, const Block32& blk) {
  std::memcpy(&w[lane], &blk.d[0], 4);
  std::memcpy(&w[16 + lane], &blk.m[0], 4);
  int q[32];
  std::copy_n(blk.q, 32, q);
  put_nibbles(w + 32, lane, q);
}

void fill_q8(PackLayout layout, uint32_t* w, int lane, const Block32& blk) {
  const int scales = q8_scale_words(layout), mins = q8_min_words(layout);
  for (int h = 0; h < scales / 16; ++h) std::memcpy(&w[16 * h + lane], &blk.d[h], 4);
  for (int h = 0; h < mins / 16; ++h) std::memcpy(&w[scales + 16 * h + lane], &blk.m[h], 4);
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
    for (int i = 0; i < 4; ++i) word |= uint32_t(uint8_t(blk.q[4 * k + i] + 128)) << (8 * i);
    w[scales + mins + k * 16 + lane] = word;
  }
}

// One row's block of a K layout (the block's words w, the row's lane): the
// int8 factors, the low nibbles and the high planes of q + offset (KLayout).
void fill_k(const KLayout& kl, uint32_t* w, int lane, const Block32& blk, const BlockScales& bs) {
  auto* factors = reinterpret_cast<int8_t*>(w);
  factors[lane] = bs.sc[0];
  factors[16 + lane] = kl.half_scales ? bs.sc[1] : bs.mn[0];
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = blk.q[i] + kl.offset;
  put_nibbles(w + kKNibbles, lane, q);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 4; ++i) {
      const int lo = q[8 * k + i], hi = q[8 * k + 4 + i];
      if (kl.planes == 1) w[kKPlanes + lane] |= uint32_t(lo >> 4 | (hi >> 4) << 1) << (8 * i + 2 * k);
      if (kl.planes == 2)
        w[kKPlanes + 16 * (k / 2) + lane] |= uint32_t(lo >> 4 | (hi >> 4) << 2) << (8 * i + 4 * (k % 2));
    }
}

// The K layouts (Q4_K, Q5_K, Q6_K): per group and super-block the rows' d
// (and negated dmin), then the blocks (fill_k).
PackedWords pack_k_rows(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols, size_t row_bytes) {
  const PackLayout l = pack_layout(type);
  const KLayout kl = k_layout(l);
  const int nb = int(cols / kQBlock);
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  PackedWords out(size_t(groups) * pack_group_words(l, nb), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = data + size_t(r) * row_bytes;
    const int lane = int(r % kPackRows);
    for (int b = 0; b < nb; ++b) {
      const BlockScales bs = block_scales(type, row, b);
      uint32_t* sup = out.data() + size_t(r / kPackRows) * pack_group_words(l, nb) + size_t(b / 8) * k_super_words(l);
      std::memcpy(&sup[lane], &bs.d, 4);
      if (kl.mins) std::memcpy(&sup[16 + lane], &bs.dmin, 4);
      fill_k(kl, sup + k_header_words(l) + (b % 8) * k_block_words(l), lane, block32(type, row, b), bs);
    }
  }
  return out;
}

float word_float(const uint32_t* w, int i) {
  float f;
  std::memcpy(&f, &w[i], 4);
  return f;
}

// The Q8 layouts read in plain C++, summing as the SIMD kernels do per block
// (exact int32 dots per half where L scales halves apart, then
// dot * (d * dx), then the minimums).
template <PackLayout L>
void q8_packed_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy) {
  constexpr int kScales = q8_scale_words(L), kMins = q8_min_words(L), kHalves = kScales / 16;
  for (int r = 0; r < n_rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const uint32_t* w = group + size_t(b) * pack_block_words(L);
        const BlockQ8& a = acts[size_t(t) * nb + b];
        int isum[2] = {0, 0};
        for (int k = 0; k < 8; ++k)
          for (int i = 0; i < 4; ++i)
            isum[k * kHalves / 8] += ((int(w[kScales + kMins + k * 16 + r] >> (8 * i)) & 0xff) - 128) * a.qs[4 * k + i];
        for (int h = 0; h < kHalves; ++h) acc += float(isum[h]) * (word_float(w, 16 * h + r) * a.d);
        const MinWeights mw = min_weights<L>(a);
        for (int h = 0; h < kMins / 16; ++h) acc += word_float(w, kScales + 16 * h + r) * mw.s[h];
      }
      y[size_t(t) * ldy + r] = acc;
    }
}

// The looked-up layouts read in plain C++, as the SIMD kernels sum per
// block: the exact integer dot of the codes' values, then dot * (scale * dx).
// MXFP4 (words per block, nibbles at word 4): the grid, scales from the E8M0
// exponent bytes; IQ4 (nibbles at word 16): kIq4Values, the stored fp32 scales.
template <int kWords, int kNibbles, class Value, class Scale>
void lut_packed_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy,
                       Value value, Scale scale) {
  for (int r = 0; r < n_rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const uint32_t* w = group + size_t(b) * kWords;
        const BlockQ8& a = acts[size_t(t) * nb + b];
        int isum = 0;
        for (int k = 0; k < 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int byte = int(w[kNibbles + k * 16 + r] >> (8 * i)) & 0xff;
            isum += value(byte & 0xf) * a.qs[8 * k + i] + value(byte >> 4) * a.qs[8 * k + 4 + i];
          }
        acc += float(isum) * (scale(w, r) * a.d);
      }
      y[size_t(t) * ldy + r] = acc;
    }
}

void mx_packed_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy) {
  lut_packed_scalar<kMxBlockWords, 4>(
      group, nb, n_rows, acts, n_tok, y, ldy, [](int code) { return kMxBiased[code] - kMxBias; },
      [](const uint32_t* w, int r) {
        const uint32_t bits = mx_scale_bits(reinterpret_cast<const uint8_t*>(w)[r]);
        float s;
        std::memcpy(&s, &bits, 4);
        return s;
      });
}

void iq4_packed_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y,
                       int ldy) {
  lut_packed_scalar<kIq4BlockWords, 16>(
      group, nb, n_rows, acts, n_tok, y, ldy, [](int code) { return int(kIq4Values[code]); },
      [](const uint32_t* w, int r) { return word_float(w, r); });
}

// The K layouts read in plain C++, summing as the SIMD kernels do per block
// (exact int32 dots per half where L scales halves apart, the scales d * sc
// exact in fp32, then dot * (scale * dx), then the minimum).
template <PackLayout L>
void k_packed_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy) {
  constexpr KLayout kl = k_layout(L);
  constexpr int kHalves = kl.half_scales ? 2 : 1;
  for (int r = 0; r < n_rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const uint32_t* sup = group + size_t(b / 8) * k_super_words(L);
        const uint32_t* w = sup + k_header_words(L) + (b % 8) * k_block_words(L);
        const auto* factors = reinterpret_cast<const int8_t*>(w);
        const BlockQ8& a = acts[size_t(t) * nb + b];
        int isum[2] = {-kl.offset * (kHalves == 2 ? a.sum_lo : a.sum), -kl.offset * (a.sum - a.sum_lo)};
        for (int k = 0; k < 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int byte = int(w[kKNibbles + 16 * k + r] >> (8 * i)) & 0xff;
            int lo = byte & 0xf, hi = byte >> 4;
            if (kl.planes == 1) {
              const int bits = int(w[kKPlanes + r] >> (8 * i + 2 * k)) & 3;
              lo |= (bits & 1) << 4, hi |= (bits >> 1) << 4;
            }
            if (kl.planes == 2) {
              const int bits = int(w[kKPlanes + 16 * (k / 2) + r] >> (8 * i + 4 * (k % 2))) & 15;
              lo |= (bits & 3) << 4, hi |= (bits >> 2) << 4;
            }
            isum[k * kHalves / 4] += lo * a.qs[8 * k + i] + hi * a.qs[8 * k + 4 + i];
          }
        for (int h = 0; h < kHalves; ++h)
          acc += float(isum[h]) * ((word_float(sup, r) * float(factors[16 * h + r])) * a.d);
        if (kl.mins) acc += word_float(sup, 16 + r) * float(factors[16 + r]) * min_weights<L>(a).s[0];
      }
      y[size_t(t) * ldy + r] = acc;
    }
}

}  // namespace

PackLayout pack_layout(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: return PackLayout::kQ4;
    case GgmlType::Q4_K: return PackLayout::kQ4K;
    case GgmlType::Q5_K: return PackLayout::kQ5K;
    case GgmlType::Q6_K: return PackLayout::kQ6K;
    case GgmlType::Q5_1: return PackLayout::kQ8Min;
    case GgmlType::Q3_K: return PackLayout::kQ8Half;
    case GgmlType::Q2_K: return PackLayout::kQ8HalfMin;
    case GgmlType::MXFP4: return PackLayout::kMx;
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: return PackLayout::kIq4;
    default: return PackLayout::kQ8;  // Q8_0, Q5_0
  }
}

PackedWords pack_block32_rows(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols) {
  const size_t row_bytes = size_t(cols) / size_t(type_info(uint32_t(type))->block_elems) *
                           size_t(type_info(uint32_t(type))->block_bytes);
  const PackLayout layout = pack_layout(type);
  if (is_k_layout(layout)) return pack_k_rows(type, data, rows, cols, row_bytes);
  if (layout == PackLayout::kMx)
    return pack_rows(rows, cols, kMxBlockWords, [&](uint32_t* w, int lane, int64_t r, int b) {
      const BlockMXFP4& blk = reinterpret_cast<const BlockMXFP4*>(data + size_t(r) * row_bytes)[b];
      reinterpret_cast<uint8_t*>(w)[lane] = blk.e;
      int q[32];
      for (int i = 0; i < 16; ++i) q[i] = blk.qs[i] & 0xF, q[16 + i] = blk.qs[i] >> 4;
      put_nibbles(w + 4, lane, q);
    });
  if (layout == PackLayout::kIq4)
    return pack_rows(rows, cols, kIq4BlockWords, [&](uint32_t* w, int lane, int64_t r, int b) {
      const Block32 blk = block32(type, data + size_t(r) * row_bytes, b);
      std::memcpy(&w[lane], &blk.d[0], 4);
      int q[32];
      for (int i = 0; i < 32; ++i) q[i] = int(std::find(kIq4Values, kIq4Values + 16, blk.q[i]) - kIq4Values);
      put_nibbles(w + 16, lane, q);
    });
  return pack_rows(rows, cols, pack_block_words(layout), [&](uint32_t* w, int lane, int64_t r, int b) {
    const Block32 blk = block32(type, data + size_t(r) * row_bytes, b);
    if (layout == PackLayout::kQ4)
      fill_q4(w, lane, blk);
    else
      fill_q8(layout, w, lane, blk);
  });
}

// The Q4 layout read in plain C++, summing as the SIMD kernels do per block
// (an exact int32 dot, then dot * (d * dx) + m * s).
void qdot16_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy) {
  for (int r = 0; r < n_rows; ++r)
    for (int t = 0; t < n_tok; ++t) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const uint32_t* w = group + size_t(b) * kPackBlockWords;
        const BlockQ8& a = acts[size_t(t) * nb + b];
        int isum = 0;
        for (int k = 0; k < 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int byte = int(w[32 + k * 16 + r] >> (8 * i)) & 0xff;
            isum += (byte & 0xf) * a.qs[8 * k + i] + (byte >> 4) * a.qs[8 * k + 4 + i];
          }
        acc += float(isum) * (word_float(w, r) * a.d) + word_float(w, 16 + r) * a.s;
      }
      y[size_t(t) * ldy + r] = acc;
    }
}

void qdot16q8_scalar(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                     float* y, int ldy) {
  switch (layout) {
    case PackLayout::kQ4K: return k_packed_scalar<PackLayout::kQ4K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ5K: return k_packed_scalar<PackLayout::kQ5K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ6K: return k_packed_scalar<PackLayout::kQ6K>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Min: return q8_packed_scalar<PackLayout::kQ8Min>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8Half: return q8_packed_scalar<PackLayout::kQ8Half>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kQ8HalfMin:
      return q8_packed_scalar<PackLayout::kQ8HalfMin>(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kMx: return mx_packed_scalar(group, nb, n_rows, acts, n_tok, y, ldy);
    case PackLayout::kIq4: return iq4_packed_scalar(group, nb, n_rows, acts, n_tok, y, ldy);
    default: return q8_packed_scalar<PackLayout::kQ8>(group, nb, n_rows, acts, n_tok, y, ldy);
  }
}

Weight view_weight(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) {
  Weight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  const TypeInfo info = *type_info(uint32_t(type));
  w.row_bytes = size_t(cols) / info.block_elems * info.block_bytes;
  w.data = data;
  return w;
}

Weight make_weight(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) {
  Weight w = view_weight(type, rows, cols, data);
  // Plain floats: the file's values, on huge pages.
  if (plain_float(type)) {
    w.owned.assign(data, data + size_t(rows) * w.row_bytes);
    w.data = w.owned.data();
  }
  // Q4_0/Q4_1/Q8_0 also have a scalar kernel on the file's layout, so they
  // are repacked only for the SIMD kernels.
  if (only_repacked(type) || (file_layout_kernel(type) && cpu_isa() >= Isa::kAvx2))
    w.packed = pack_block32_rows(type, data, rows, cols);
  return w;
}

// Scale and inverse as llama.cpp computes them (d = amax / 127, values
// rounded to nearest even at x * 127 / amax), so the rounded values, and hence
// results on models with outlier activations, agree with it. AVX2 is the
// binary's baseline: cvtps_epi32 rounds to nearest even as nearbyint does in
// the default mode, and F16C rounds the scales as f32_to_f16 does, so this
// is bit for bit the scalar formula (tests/quant_test.cpp).
void quantize_q8(const float* x, size_t n, BlockQ8* out) {
  static_assert(kQBlock == 32, "a block is four 8-float vectors below");
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (size_t b = 0; b < n / kQBlock; ++b, x += kQBlock) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0 ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    // |q| <= 127, so the saturating packs are exact; they interleave 128-bit
    // lanes, which the permute puts back in order.
    const __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs),
                        _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    const int sum = _mm_cvtsi128_si32(s);
    out[b].sum = sum;
    __m128i lo = _mm_add_epi32(_mm256_castsi256_si128(q[0]), _mm256_extracti128_si256(q[0], 1));
    lo = _mm_add_epi32(lo, _mm_add_epi32(_mm256_castsi256_si128(q[1]), _mm256_extracti128_si256(q[1], 1)));
    lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0x4e));
    lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0xb1));
    out[b].sum_lo = _mm_cvtsi128_si32(lo);
    out[b].d = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    out[b].ds = out[b].d * float(sum);
    out[b].s = _cvtsh_ss(_cvtss_sh(d * float(sum), _MM_FROUND_TO_NEAREST_INT));
  }
}

void qdot_scalar(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
                 const BlockQ8* acts, int nb, int n_tok, float* y, int ldy) {
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows + size_t(r) * row_bytes;
    for (int t = 0; t < n_tok; ++t) {
      const BlockQ8* a = acts + size_t(t) * nb;
      float sum = 0;
      for (int b = 0; b < nb; ++b) {
        int isum = 0;
        float dw, off;
        if (type == GgmlType::Q8_0) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
          for (int j = 0; j < 32; ++j) isum += int(blk->qs[j]) * a[b].qs[j];
          dw = f16_to_f32(blk->d);
          off = 0;
        } else {
          const bool q41 = type == GgmlType::Q4_1;
          const uint8_t* qs = q41 ? reinterpret_cast<const BlockQ4_1*>(row)[b].qs
                                  : reinterpret_cast<const BlockQ4_0*>(row)[b].qs;
          for (int j = 0; j < 16; ++j)
            isum += (qs[j] & 0xf) * a[b].qs[j] + (qs[j] >> 4) * a[b].qs[j + 16];
          dw = f16_to_f32(q41 ? reinterpret_cast<const BlockQ4_1*>(row)[b].d
                              : reinterpret_cast<const BlockQ4_0*>(row)[b].d);
          const float mw =
              q41 ? f16_to_f32(reinterpret_cast<const BlockQ4_1*>(row)[b].m) : -8.0f * dw;
          off = mw * a[b].s;
        }
        sum += dw * a[b].d * float(isum) + off;
      }
      y[size_t(t) * ldy + r] = sum;
    }
  }
}

namespace {

QDotKernel pick_kernel() {
  switch (cpu_isa()) {
    case Isa::kAvx512: return qdot_avx512;
    case Isa::kAvx2: return qdot_avx2;
    default: return qdot_scalar;
  }
}

// Rows per task: small enough to balance two cores, large enough that the
// activations stay in L1 while a tile of rows streams past.
constexpr int kRowTile = kPackRows;

// The dot of one tile of rows (kRowTile from r0, fewer at the end) with nt
// activation rows, into y[t * ldy + r - r0] (ldy 0: w.rows), by the best
// kernel for the weight's layout on this CPU.
struct TileDot {
  QDotKernel kernel = pick_kernel();
  Isa isa = cpu_isa();
  void operator()(const Weight& w, int64_t r0, const BlockQ8* acts, int nb, int nt, float* y, int ldy = 0) const {
    if (ldy == 0) ldy = int(w.rows);
    const int nr = int(std::min<int64_t>(kRowTile, w.rows - r0));
    // Q4_0/Q4_1/Q8_0 have a scalar kernel on the file's layout; the types
    // that exist only repacked run the packed layouts' scalar kernels.
    const bool packed = !w.packed.empty() && (isa >= Isa::kAvx2 || only_repacked(w.type));
    const PackLayout layout = pack_layout(w.type);
    const size_t group = size_t(r0 / kPackRows) * pack_group_words(layout, nb);
    if (packed && layout != PackLayout::kQ4)  // kRowTile == kPackRows: a tile is one group
      (isa == Isa::kAvx512 ? qdot16q8_avx512 : isa == Isa::kAvx2 ? qdot16q8_avx2 : qdot16q8_scalar)(
          layout, w.packed.data() + group, nb, nr, acts, nt, y, ldy);
    else if (packed)
      (isa == Isa::kAvx512 ? qdot16_avx512 : isa == Isa::kAvx2 ? qdot16_avx2 : qdot16_scalar)(
          w.packed.data() + group, nb, nr, acts, nt, y, ldy);
    else
      kernel(w.type, w.data + size_t(r0) * w.row_bytes, w.row_bytes, nr, acts, nb, nt, y, ldy);
  }
};

// A float row's dot in one order on every machine: 32 lanes, lane j adding
// the products of columns j, j + 32, ... by fma in column order, then the
// upper half of the lanes added to the lower (16, 8, 4, 2, 1). The GPU's
// kernel sums a warp's 32 lanes the same way (model/cuda_matmul_kernels.cu,
// float_matmul_kernel), so its float matmul is this one bit for bit. Lane j
// is element j % 8 of vector j / 8 below; F16 and BF16 values are widened
// exactly (F16C's vcvtph2ps, a 16-bit shift), so a file's values give the
// same bits whichever of the three types holds them.

// A row's 8 values from column c on, as fp32.
template <GgmlType T>
inline __m256 load8(const uint8_t* row, int64_t c) {
  if constexpr (T == GgmlType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    if constexpr (T == GgmlType::F16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <GgmlType T>
inline float value(const uint8_t* row, int64_t c) {
  if constexpr (T == GgmlType::F32) {
    float v;
    std::memcpy(&v, row + 4 * c, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    return T == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

// A dot's end: its lane groups g0..g3 (lane j of group q is lane 8q + j of
// the 32), columns [full, n) lane by lane, then the halves 16, 8, 4, 2, 1.
template <GgmlType T>
inline float finish_lanes(__m256 g0, __m256 g1, __m256 g2, __m256 g3, const uint8_t* row, const float* x,
                          int64_t full, int64_t n) {
  if (full < n) {  // a partial group of 32 columns
    alignas(32) float a[32];
    _mm256_store_ps(a, g0), _mm256_store_ps(a + 8, g1), _mm256_store_ps(a + 16, g2), _mm256_store_ps(a + 24, g3);
    for (int j = 0; full + j < n; ++j) a[j] = std::fma(value<T>(row, full + j), x[full + j], a[j]);
    for (int h = 16; h >= 1; h /= 2)
      for (int j = 0; j < h; ++j) a[j] += a[j + h];
    return a[0];
  }
  // On the vectors: lanes j and j + 16 are groups q and q + 2, j and j + 8
  // groups 0 and 1, then within one: 4, 2, 1.
  const __m256 v = _mm256_add_ps(_mm256_add_ps(g0, g2), _mm256_add_ps(g1, g3));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// RB rows (`rows` on, row_bytes apart; nr of them real) times TB token rows
// (x, ldx apart; nt real), into y[t * ldy + i]. Each lane group q of the 32
// (columns 8q..8q+7 of every 32) adds up apart from the others, so a pass
// over one group holds RB x TB accumulators, a vector each (3 x 4: 12 of
// AVX2's 16 registers, beside the 3 rows' values, widened once for the 4
// tokens, and a token's 8 activations); then each dot's four groups are
// finished as one (finish_lanes).
template <GgmlType T, int RB, int TB>
void float_block(const uint8_t* rows, size_t row_bytes, int nr, const float* x, int64_t ldx, int nt, int64_t n,
                 float* y, int64_t ldy) {
  const uint8_t* w[RB];
  const float* xs[TB];
  for (int i = 0; i < RB; ++i) w[i] = rows + size_t(i < nr ? i : 0) * row_bytes;  // missing rows: row 0 again
  for (int t = 0; t < TB; ++t) xs[t] = x + (t < nt ? t : 0) * ldx;
  const int64_t full = n / 32 * 32;
  __m256 sums[4][RB][TB];
  for (int q = 0; q < 4; ++q) {
    __m256 acc[RB][TB];
    for (int i = 0; i < RB; ++i)
      for (int t = 0; t < TB; ++t) acc[i][t] = _mm256_setzero_ps();
    for (int64_t c = 8 * q; c < full; c += 32) {
      __m256 wv[RB];
      for (int i = 0; i < RB; ++i) wv[i] = load8<T>(w[i], c);
      for (int t = 0; t < TB; ++t) {
        const __m256 xv = _mm256_loadu_ps(xs[t] + c);
        for (int i = 0; i < RB; ++i) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
      }
    }
    for (int i = 0; i < RB; ++i)
      for (int t = 0; t < TB; ++t) sums[q][i][t] = acc[i][t];
  }
  for (int i = 0; i < nr; ++i)
    for (int t = 0; t < nt; ++t)
      y[t * ldy + i] = finish_lanes<T>(sums[0][i][t], sums[1][i][t], sums[2][i][t], sums[3][i][t], w[i], xs[t], full, n);
}

// One token (decode, bound by reading the row): the row streamed once in
// column order, its 32 lanes as 4 vectors (4 independent chains).
template <GgmlType T>
float float_row(const uint8_t* row, const float* x, int64_t n) {
  __m256 acc[4];
  for (int q = 0; q < 4; ++q) acc[q] = _mm256_setzero_ps();
  const int64_t full = n / 32 * 32;
  for (int64_t c = 0; c < full; c += 32)
    for (int q = 0; q < 4; ++q) acc[q] = _mm256_fmadd_ps(load8<T>(row, c + 8 * q), _mm256_loadu_ps(x + c + 8 * q), acc[q]);
  return finish_lanes<T>(acc[0], acc[1], acc[2], acc[3], row, x, full, n);
}

// Token rows per pass over the rows: a tile's activations (128 KiB) stay in
// L2 while the rows stream past them.
int64_t float_token_tile(int64_t cols) { return std::max<int64_t>(4, (int64_t(128) << 10) / (cols * 4) / 4 * 4); }

// One token: a row at a time (float_row; two rows at a time ran the 113 MB
// head at 0.56x on Zen 3). More: blocks of 3 rows by 4 tokens, over token
// tiles.
template <GgmlType T>
void matmul_float_t(const Weight& w, const float* x, int n_tok, float* y) {
  const int64_t rows = w.rows, cols = w.cols;
  if (n_tok == 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) y[r] = float_row<T>(w.data + size_t(r) * w.row_bytes, x, cols);
    return;
  }
  const int64_t tile = float_token_tile(cols), tiles = (n_tok + tile - 1) / tile, blocks = (rows + 2) / 3;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t k = 0; k < tiles; ++k)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r = 3 * b, end = std::min<int64_t>(n_tok, (k + 1) * tile);
      const int nr = int(std::min<int64_t>(3, rows - r));
      for (int64_t t = k * tile; t < end; t += 4)
        float_block<T, 3, 4>(w.data + size_t(r) * w.row_bytes, w.row_bytes, nr, x + t * cols, cols,
                             int(std::min<int64_t>(4, end - t)), cols, y + t * rows + r, rows);
    }
}

void matmul_float(const Weight& w, const float* x, int n_tok, float* y) {
  switch (w.type) {
    case GgmlType::F32: return matmul_float_t<GgmlType::F32>(w, x, n_tok, y);
    case GgmlType::F16: return matmul_float_t<GgmlType::F16>(w, x, n_tok, y);
    case GgmlType::BF16: return matmul_float_t<GgmlType::BF16>(w, x, n_tok, y);
    default: throw Error("matmul_float: not a plain float matrix");
  }
}

// Token rows per product: bounds the activation working set of long prefills.
constexpr int kTokTile = 64;

// y = W x over quantized activations (n_tok rows of nb blocks): one
// parallel region over the row tiles of every weight, fewer fork/joins per
// layer, which is what a small model's decode step is made of. Guided, not
// static: threads on a shared machine (a VM's cores, a busy neighbour) run
// at unequal speeds, and with equal shares the region waits for the slowest;
// guided hands out shrinking runs of tiles to whichever thread is free
// (docs/benchmarks.md, thread scaling). A tile's bits do not depend on the
// thread that computes it.
void dot_tiles(std::span<const Weight* const> ws, const BlockQ8* acts, int nb, int n_tok,
               std::span<float* const> ys) {
  const TileDot dot;
  int64_t tiles_before[8] = {0};
  const size_t nw = ws.size();
  for (size_t i = 0; i < nw; ++i) tiles_before[i + 1] = tiles_before[i] + (ws[i]->rows + kRowTile - 1) / kRowTile;
  const int64_t n_tiles = tiles_before[nw];
#pragma omp parallel for schedule(guided) collapse(2)
  for (int t0 = 0; t0 < n_tok; t0 += kTokTile) {
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      size_t i = 0;
      while (tile >= tiles_before[i + 1]) ++i;
      const Weight& w = *ws[i];
      const int64_t r0 = (tile - tiles_before[i]) * kRowTile;
      dot(w, r0, acts + size_t(t0) * nb, nb, std::min(kTokTile, n_tok - t0), ys[i] + size_t(t0) * w.rows + r0);
    }
  }
}

}  // namespace

void matmul(const Weight& w, const float* x, int n_tok, float* y, std::vector<BlockQ8>& scratch) {
  const Weight* ws[] = {&w};
  float* ys[] = {y};
  matmul_multi(ws, x, n_tok, ys, scratch);
}

namespace {

// Both levels of n_tok rows, x = d1 q1 + d2 q2: level two quantizes what
// level one left.
void quantize_two_levels(const float* x, int n_tok, size_t cols, HeadScratch& h) {
  const int nb = int(cols / kQBlock);
  h.level1.resize(size_t(n_tok) * nb);
  h.level2.resize(size_t(n_tok) * nb);
  h.residual.resize(cols);
  for (int t = 0; t < n_tok; ++t) {
    const float* xt = x + size_t(t) * cols;
    BlockQ8* b1 = h.level1.data() + size_t(t) * nb;
    BlockQ8* b2 = h.level2.data() + size_t(t) * nb;
    quantize_q8(xt, cols, b1);
    // x - d q rounded once (the GPU's head takes the same step).
    for (size_t i = 0; i < cols; ++i)
      h.residual[i] = std::fma(-b1[i / kQBlock].d, float(b1[i / kQBlock].qs[i % kQBlock]), xt[i]);
    quantize_q8(h.residual.data(), cols, b2);
    // Q4_0/Q4_1 kernels weigh a block's offset by s, rounded through fp16
    // at level one: level two's s carries the rest of the block's true sum.
    for (int b = 0; b < nb; ++b) {
      float sum = 0;
      for (int i = 0; i < kQBlock; ++i) sum += xt[size_t(b) * kQBlock + i];
      b2[b].s = sum - b1[b].s;
    }
  }
}

// The largest of a tile's outputs (rows r0 to r1 of one row of y); a NaN
// after the first output is passed over, as the comparison leaves it.
inline float tile_max_of(const float* yt, size_t r0, size_t r1) {
  float mx = yt[r0];
#pragma omp simd reduction(max : mx)
  for (size_t r = r0; r < r1; ++r) mx = yt[r] > mx ? yt[r] : mx;
  return mx;
}

// For each tile of outputs, the rows whose output there is within `margin`
// of that row's top (h.tile_rows, h.tile_count), from the tiles' maxima
// (h.tile_max, row by row).
void select_from_maxima(int n_tok, int64_t n_tiles, float margin, HeadScratch& h) {
  h.floor.resize(size_t(n_tok));
  for (int t = 0; t < n_tok; ++t) {
    const float* m = h.tile_max.data() + size_t(t) * size_t(n_tiles);
    float top = m[0];
#pragma omp simd reduction(max : top)
    for (int64_t tile = 0; tile < n_tiles; ++tile) top = m[tile] > top ? m[tile] : top;
    h.floor[size_t(t)] = top - margin;
  }
  h.tile_rows.assign(size_t(n_tiles) * size_t(n_tok), 0);
  h.tile_count.assign(size_t(n_tiles), 0);
  for (int64_t tile = 0; tile < n_tiles; ++tile)
    for (int t = 0; t < n_tok; ++t)
      if (h.tile_max[size_t(t) * size_t(n_tiles) + size_t(tile)] >= h.floor[size_t(t)])
        h.tile_rows[size_t(tile) * size_t(n_tok) + size_t(h.tile_count[size_t(tile)]++)] = t;
}

void select_tiles(const float* y, int n_tok, size_t rows, float margin, HeadScratch& h) {
  const int64_t n_tiles = int64_t((rows + kRowTile - 1) / kRowTile);
  h.tile_max.resize(size_t(n_tok) * size_t(n_tiles));
#pragma omp parallel for schedule(static) if (n_tok > 1)
  for (int t = 0; t < n_tok; ++t)
    for (int64_t tile = 0; tile < n_tiles; ++tile)  // vectorised maxima (a 262144-token head has 16384 tiles)
      h.tile_max[size_t(t) * size_t(n_tiles) + size_t(tile)] =
          tile_max_of(y + size_t(t) * rows, size_t(tile) * kRowTile, std::min(rows, size_t(tile + 1) * kRowTile));
  select_from_maxima(n_tok, n_tiles, margin, h);
}

// A float's atomic maximum (NaN is never stored); returns the maximum now.
float raise_to(std::atomic<float>& top, float v) {
  float cur = top.load(std::memory_order_relaxed);
  while (v > cur && !top.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
  return v > cur ? v : cur;
}

// Few rows (n_tok <= kStackedRows): one pass over the weights, each tile's
// level one and then, while its weights are still in cache, level two for the
// rows whose level one there comes within `margin` of that row's largest
// output found so far. That running largest never exceeds the final one, so
// every (tile, row) the final selection (on level one's tile maxima, as for
// many rows) picks has its level two; those refined early, before a row's top
// was found, are computed for nothing and not added. Which those are depends
// on the threads' timing; the result does not. On a peaked row most tiles
// skip level two. On a flat one (random weights) most need it, and a second
// kernel call per tile would decode its weights twice: a thread whose last
// tile needed level two for most rows runs the next one's both levels as 2n
// rows of one call, as the stacked pass this replaced did everywhere (a row's
// bits do not depend on the rows beside it).
void refine_few_rows(const Weight& w, int n_tok, float margin, float* y, HeadScratch& h) {
  const size_t rows = size_t(w.rows), n = size_t(n_tok);
  const int nb = int(w.cols / kQBlock);
  const int64_t n_tiles = int64_t((rows + kRowTile - 1) / kRowTile);
  // Activations: level one's n rows, then level two's; outputs likewise.
  h.stacked.assign(h.level1.begin(), h.level1.end());
  h.stacked.insert(h.stacked.end(), h.level2.begin(), h.level2.end());
  h.out.resize(2 * n * rows);
  h.tile_max.resize(n * size_t(n_tiles));
  h.has_level2.assign(size_t(n_tiles) * n, 0);
  std::atomic<float> top[kStackedRows];
  for (auto& a : top) a.store(-INFINITY, std::memory_order_relaxed);
  const TileDot dot;
  // Activation rows [a, b) of the stacked 2n on one tile, in one call.
  auto rows_of = [&](size_t tile, size_t a, size_t b) {
    dot(w, int64_t(tile) * kRowTile, h.stacked.data() + a * size_t(nb), nb, int(b - a),
        h.out.data() + a * rows + tile * kRowTile);
  };
#pragma omp parallel
  {
    bool stack = false;  // most rows of this thread's last tile needed level two
#pragma omp for schedule(guided)
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const size_t r0 = size_t(tile) * kRowTile, r1 = std::min(rows, r0 + kRowTile);
      uint8_t* has = h.has_level2.data() + size_t(tile) * n;
      rows_of(size_t(tile), 0, stack ? 2 * n : n);
      if (stack) std::fill_n(has, n, uint8_t(1));
      bool near[kStackedRows];
      size_t n_near = 0;
      for (size_t t = 0; t < n; ++t) {
        const float mx = tile_max_of(h.out.data() + t * rows, r0, r1);
        h.tile_max[t * size_t(n_tiles) + size_t(tile)] = mx;
        near[t] = mx >= raise_to(top[t], mx) - margin;
        n_near += near[t];
      }
      stack = 2 * n_near >= n + 1;  // most rows near: likely so on the next tile too
      for (size_t a = 0; a < n;) {  // level two's runs of near rows not yet computed
        if (!near[a] || has[a]) {
          ++a;
          continue;
        }
        size_t b = a + 1;
        while (b < n && near[b] && !has[b]) ++b;
        rows_of(size_t(tile), n + a, n + b);
        std::fill(has + a, has + b, uint8_t(1));
        a = b;
      }
    }
  }
  select_from_maxima(n_tok, n_tiles, margin, h);
  h.level2_pairs = std::count(h.has_level2.begin(), h.has_level2.end(), uint8_t(1));
#pragma omp parallel for schedule(static)
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const size_t r0 = size_t(tile) * kRowTile, r1 = std::min(rows, r0 + kRowTile);
    for (size_t t = 0; t < n; ++t) std::copy(h.out.data() + t * rows + r0, h.out.data() + t * rows + r1, y + t * rows + r0);
    for (int i = 0; i < h.tile_count[size_t(tile)]; ++i) {
      const size_t t = size_t(h.tile_rows[size_t(tile) * n + size_t(i)]);
      // Never taken unless a NaN among the outputs broke the bound above:
      // level two computed here gives the same bits.
      if (!h.has_level2[size_t(tile) * n + t]) rows_of(size_t(tile), n + t, n + t + 1);
      const float* l2 = h.out.data() + (n + t) * rows;
      for (size_t r = r0; r < r1; ++r) y[t * rows + r] += l2[r];
    }
  }
}

}  // namespace

void matmul_refined(const Weight& w, const float* x, int n_tok, float margin, float* y, HeadScratch& h) {
  if (plain_float(w.type)) return matmul(w, x, n_tok, y, h.level1);
  const size_t cols = size_t(w.cols), rows = size_t(w.rows);
  const int nb = int(cols / kQBlock);
  quantize_two_levels(x, n_tok, cols, h);
  if (n_tok <= kStackedRows) return refine_few_rows(w, n_tok, margin, y, h);
  // Many rows: level one for every output, then level two only on the
  // selected (tile, row) pairs, each tile once for the rows that select it.
  const Weight* ws[] = {&w};
  float* ys[] = {y};
  dot_tiles(ws, h.level1.data(), nb, n_tok, ys);
  select_tiles(y, n_tok, rows, margin, h);
  const TileDot dot;
  const int64_t n_tiles = int64_t(h.tile_count.size());
  h.level2_pairs = std::accumulate(h.tile_count.begin(), h.tile_count.end(), int64_t(0));
#pragma omp parallel
  {
    std::vector<BlockQ8> acts;
    std::vector<float> part;
#pragma omp for schedule(dynamic, 16)
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int k = h.tile_count[size_t(tile)];
      if (k == 0) continue;
      const int* picked = h.tile_rows.data() + size_t(tile) * size_t(n_tok);
      // Every row selected (where logits are flat, most tiles): level two as
      // it is; otherwise the selected rows gathered.
      const BlockQ8* level2 = h.level2.data();
      if (k < n_tok) {
        acts.resize(size_t(k) * nb);
        for (int i = 0; i < k; ++i)
          std::copy_n(h.level2.data() + size_t(picked[i]) * nb, nb, acts.data() + size_t(i) * nb);
        level2 = acts.data();
      }
      part.resize(size_t(k) * kRowTile);
      const size_t r0 = size_t(tile) * kRowTile, nr = std::min<size_t>(kRowTile, rows - r0);
      dot(w, int64_t(r0), level2, nb, k, part.data(), kRowTile);
      for (int i = 0; i < k; ++i)
        for (size_t r = 0; r < nr; ++r) y[size_t(picked[i]) * rows + r0 + r] += part[size_t(i) * kRowTile + r];
    }
  }
}

void matmul_grouped(std::span<const Weight* const> ws, std::span<const float* const> xs, std::span<const int> n_toks,
                    std::span<float* const> ys, std::vector<BlockQ8>& scratch) {
  const size_t n = ws.size();
  if (n == 0) return;
  const int64_t cols = ws[0]->cols;
  bool quantized = true;
  for (const Weight* w : ws) quantized = quantized && !plain_float(w->type) && w->cols == cols;
  if (!quantized) {
    for (size_t i = 0; i < n; ++i) matmul(*ws[i], xs[i], n_toks[i], ys[i], scratch);
    return;
  }
  const int nb = int(cols / kQBlock);
  // Each distinct input quantized once: act[i] is entry i's first block.
  std::vector<size_t> act(n);
  std::vector<size_t> first_rows;  // row offset in scratch of each distinct input
  std::vector<const float*> distinct;
  std::vector<int> distinct_rows;
  size_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t d = 0;
    while (d < distinct.size() && (distinct[d] != xs[i] || distinct_rows[d] != n_toks[i])) ++d;
    if (d == distinct.size()) {
      distinct.push_back(xs[i]), distinct_rows.push_back(n_toks[i]), first_rows.push_back(rows);
      rows += size_t(n_toks[i]);
    }
    act[i] = first_rows[d] * size_t(nb);
  }
  scratch.resize(rows * size_t(nb));
  BlockQ8* acts = scratch.data();
  std::vector<std::pair<const float*, BlockQ8*>> to_quantize;
  for (size_t d = 0; d < distinct.size(); ++d)
    for (int t = 0; t < distinct_rows[d]; ++t)
      to_quantize.push_back({distinct[d] + size_t(t) * size_t(cols), acts + (first_rows[d] + size_t(t)) * size_t(nb)});
  const int nq = int(to_quantize.size());
#pragma omp parallel for schedule(static) if (nq > 1)
  for (int r = 0; r < nq; ++r) quantize_q8(to_quantize[size_t(r)].first, size_t(cols), to_quantize[size_t(r)].second);

  // Work items: each entry's (token tile, row tile) pairs, numbered in one range.
  std::vector<int64_t> before(n + 1, 0), row_tiles(n);
  for (size_t i = 0; i < n; ++i) {
    row_tiles[i] = (ws[i]->rows + kRowTile - 1) / kRowTile;
    const int64_t tok_tiles = (n_toks[i] + kTokTile - 1) / kTokTile;
    before[i + 1] = before[i] + row_tiles[i] * tok_tiles;
  }
  const TileDot dot;
  const int64_t items = before[n];
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const size_t i = size_t(std::upper_bound(before.begin(), before.end(), item) - before.begin() - 1);
    const int64_t k = item - before[i];
    const int t0 = int(k / row_tiles[i]) * kTokTile;
    const int64_t r0 = (k % row_tiles[i]) * kRowTile;
    const Weight& w = *ws[i];
    dot(w, r0, acts + act[i] + size_t(t0) * size_t(nb), nb, std::min(kTokTile, n_toks[i] - t0),
        ys[i] + size_t(t0) * size_t(w.rows) + size_t(r0));
  }
}

void matmul_multi(std::span<const Weight* const> ws, const float* x, int n_tok,
                  std::span<float* const> ys, std::vector<BlockQ8>& scratch) {
  if (ws.size() > 7) {  // the tile table below holds 7 weights
    matmul_multi(ws.first(7), x, n_tok, ys.first(7), scratch);
    return matmul_multi(ws.subspan(7), x, n_tok, ys.subspan(7), scratch);
  }
  const int64_t cols = ws[0]->cols;
  bool quantized = true;
  for (const Weight* w : ws) quantized = quantized && !plain_float(w->type) && w->cols == cols;
  if (!quantized) {
    for (size_t i = 0; i < ws.size(); ++i) {
      if (plain_float(ws[i]->type)) matmul_float(*ws[i], x, n_tok, ys[i]);
      else matmul(*ws[i], x, n_tok, ys[i], scratch);
    }
    return;
  }
  // The activations are quantized once for all the weights that read them.
  const int nb = int(cols / kQBlock);
  scratch.resize(size_t(n_tok) * nb);
  BlockQ8* acts = scratch.data();
#pragma omp parallel for schedule(static) if (n_tok > 1)
  for (int t = 0; t < n_tok; ++t) quantize_q8(x + size_t(t) * cols, size_t(cols), acts + size_t(t) * nb);

  dot_tiles(ws, acts, nb, n_tok, ys);
}

}  // namespace cs
