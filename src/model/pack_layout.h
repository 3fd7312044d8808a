// The repacked weight layouts of the 16-row kernels (Weight::packed): rows in
// groups of 16, and per block of 32 values the rows' scales as vectors and
// their values interleaved so that one vpdpbusd advances 16 rows by 4 values.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/ggml_types.h"

namespace cs {

// Per block of 32 values, a fixed number of 32-bit words:
//   kQ4: 16 scales, 16 minimums (fp32, weighted by the activations' s), 64
//        words of nibbles (q 0..15): vector k, lane r holds row r's values
//        8k..8k+3 in its low nibbles and 8k+4..8k+7 in its high ones.
//   The Q8 layouts: scales, then minimums, then 128 words of bytes q + 128
//   (vector k, lane r: values 4k..4k+3). kQ8 has 16 scales; kQ8Min 16 scales
//   and 16 minimums (weighted by the activations' d * sum); kQ8Half 32
//   scales, one per row and half of 16 values (the rows' first halves, then
//   their second halves); kQ8HalfMin 32 scales and 32 minimums (weighted by
//   each half's d * sum).
// The K layouts (kQ4K, kQ5K, kQ6K: Q4_K, Q5_K, Q6_K) keep the file's
// factored scales, so they read little more than the file does: per
// super-block of 8 blocks a header of the rows' fp32 d (and negated dmin),
// then per block 32 bytes of int8 factors (sc of the first half or the
// block, then sc of the second half or mn), the Q4 layout's 64 words of low
// nibbles, and the values' high bits in planes (see KLayout).
// kMx (MXFP4): the file's own bytes, 4.25 bits a value: the 16 rows' E8M0
// exponents (4 words, row r at byte r), then the Q4 layout's 64 words of
// nibbles, each a code into the grid (kMxfp4Values), which the kernels look
// up with a byte shuffle as code + 12 (0..24, unsigned for vpdpbusd) and
// take 12 * sum back out: exact integer dots, as the Q8 layout's.
// kIq4 (IQ4_NL, IQ4_XS): 5 bits a value: the 16 rows' fp32 scales (IQ4_XS:
// d * (its 6-bit sub-scale - 32), exact), then the Q4 layout's 64 words of
// nibble codes into kIq4Values, looked up as code + 128 (1..241) by the
// AVX-512 kernel, which takes 128 * sum back out, and as the signed value
// by the AVX2 one (|value| with its sign on x, as the Q8 layout's): the
// same exact integer dots as the Q8 layout these types had, in 5 bits, not 9.
enum class PackLayout : uint8_t { kQ4, kQ8, kQ8Min, kQ8Half, kQ8HalfMin, kQ4K, kQ5K, kQ6K, kMx, kIq4 };
constexpr int kPackRows = 16;
constexpr int kPackBlockWords = 96;  // kQ4
constexpr int kMxBlockWords = 68;
constexpr int kMxBias = 12;
// The grid plus kMxBias, per code: the kernels' shuffle table.
inline constexpr uint8_t kMxBiased[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr int kIq4BlockWords = 80;
constexpr int kIq4Bias = 128;
// kIq4Values plus kIq4Bias, per code.
inline constexpr uint8_t kIq4Biased[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
// Scales and minimums of a Q8 layout, in words per block.
constexpr int q8_scale_words(PackLayout l) { return l == PackLayout::kQ8Half || l == PackLayout::kQ8HalfMin ? 32 : 16; }
constexpr int q8_min_words(PackLayout l) {
  return l == PackLayout::kQ8Min ? 16 : l == PackLayout::kQ8HalfMin ? 32 : 0;
}
// Words per block of the per-block layouts (all but the K layouts).
constexpr int pack_block_words(PackLayout l) {
  return l == PackLayout::kQ4    ? kPackBlockWords
         : l == PackLayout::kMx   ? kMxBlockWords
         : l == PackLayout::kIq4  ? kIq4BlockWords
                                  : q8_scale_words(l) + q8_min_words(l) + 128;
}
// An MXFP4 block's scale from its E8M0 exponent bits e, 2^(e - 128), as
// mxfp4_scale() computes it, as float bits (subnormal for e < 2).
constexpr uint32_t mx_scale_bits(uint32_t e) { return e < 2 ? uint32_t(0x00200000) << e : (e - 1) << 23; }

// A K layout's shape. Values are stored as unsigned q + offset (Q6_K's
// -32..31 as 0..63; the kernels take offset * sum back out). High planes:
// kQ5K one plane of 16 words, bit 2k (2k + 1) of byte i of lane r being
// the fifth bit of the value in nibble vector k's low (high) nibble of
// byte i; kQ6K two planes, plane k / 2 holding the two high bits of vector
// k's low nibble at bits 4 (k % 2) and of its high nibble at 4 (k % 2) + 2.
struct KLayout {
  int planes;        // high bits per value beyond the nibble
  bool half_scales;  // one sc per half of 16 (else one per block)
  bool mins;         // a minimum per block, weighted by the activations' d * sum
  int offset;
};
constexpr bool is_k_layout(PackLayout l) {
  return l == PackLayout::kQ4K || l == PackLayout::kQ5K || l == PackLayout::kQ6K;
}
constexpr KLayout k_layout(PackLayout l) {
  return l == PackLayout::kQ6K ? KLayout{2, true, false, 32}
         : l == PackLayout::kQ5K ? KLayout{1, false, true, 0}
                                 : KLayout{0, false, true, 0};
}
constexpr int k_header_words(PackLayout l) { return k_layout(l).mins ? 32 : 16; }
// Word offsets within a K layout's block: the factors, the nibbles, the planes.
constexpr int kKNibbles = 8, kKPlanes = kKNibbles + 64;
constexpr int k_block_words(PackLayout l) { return kKPlanes + 16 * k_layout(l).planes; }
constexpr int k_super_words(PackLayout l) { return k_header_words(l) + 8 * k_block_words(l); }

// Words of one group of 16 rows of nb blocks (a K layout's nb is a multiple of 8).
constexpr size_t pack_group_words(PackLayout l, int nb) {
  return is_k_layout(l) ? size_t(nb / 8) * size_t(k_super_words(l)) : size_t(nb) * size_t(pack_block_words(l));
}

// What a layout's minimums are weighted by: the block's d * sum in fp32
// (kQ8Min and the K layouts: BlockQ8::ds, computed once per block rather
// than per group of rows) or each half's (kQ8HalfMin). Not the
// fp16-rounded s the Q4 layout uses as llama.cpp's Q4_0/Q4_1 kernels do:
// where SmolLM2's outliers make d * sum ~1e4, s's rounding moved logits of a
// Q5_K_M file by ~0.5. Shared by the scalar and SIMD kernels; static, so that
// no copy compiled with AVX-512 flags can stand in for the others at link
// time.
struct MinWeights {
  float s[2];
};
template <PackLayout L>
static MinWeights min_weights(const BlockQ8& a) {
  if (L == PackLayout::kQ8HalfMin) return {{a.d * float(a.sum_lo), a.d * float(a.sum - a.sum_lo)}};
  return {{a.ds, 0.0f}};
}

}  // namespace cs
