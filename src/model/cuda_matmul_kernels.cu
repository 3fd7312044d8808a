// The device matmul's kernels (model/cuda_matmul.h): activation quantization
// and the 16-row layouts' products, each float step the CPU kernels' own
// (model/qdot_avx512.cpp, model/matmul.cpp quantize_q8), written with the
// _rn intrinsics so that nvcc neither contracts nor reorders them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/cuda.h"
#include "base/error.h"
#include "model/cuda_matmul_kernels.h"

namespace cs::cuda::kernels {
namespace {

#include "model/q8_block.inc"
static_assert(sizeof(Q8) == kBlockBytes, "BlockQ8's layout");

// c = the exact int32 product of a 16 x 32 s8 tile (A, row-major) and a
// 32 x 8 one (B): PTX's m16n8k32 fragments, c's input zero.
__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

// One warp per block of 32 values, lane i holding value i.
__global__ void quantize_kernel(const float* __restrict__ x, int64_t blocks, Q8* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (b >= blocks) return;  // the whole warp: b is the same for its lanes
  quantize_block(x[b * 32 + lane], lane, out + b);
}

// Words per block of each layout (model/pack_layout.h, pack_block_words).
template <int L>
inline constexpr int kBlockWords = L == kQ4           ? 96
                                   : L == kQ8         ? 144
                                   : L == kQ8HalfMin  ? 192
                                   : L == kMx         ? 68
                                   : L == kIq4        ? 80
                                                      : 160;  // kQ8Min, kQ8Half
// The nibble layouts (values 8k..8k+3 of row r in the low nibbles of word
// at + 16k + r, 8k+4..8k+7 in the high ones) and where their nibbles start;
// kMx and kIq4 hold codes into a grid of int8 values.
template <int L>
inline constexpr bool kNibbles = L == kQ4 || L == kMx || L == kIq4;
template <int L>
inline constexpr int kNibblesAt = L == kQ4 ? 32 : L == kMx ? 4 : 16;
// The byte layouts' values (q + 128, values 4k..4k+3 of row r in word
// at + 16k + r), after their scales and minimums.
template <int L>
inline constexpr int kValuesAt = L == kQ8 ? 16 : L == kQ8HalfMin ? 64 : 32;
// A scale per half of 16 values (kQ8Half: Q3_K; kQ8HalfMin: Q2_K).
template <int L>
inline constexpr bool kHalves = L == kQ8Half || L == kQ8HalfMin;

// Four codes (a byte each, 0..15) as their grid values, signed bytes:
// MXFP4's kvalues (pack_layout.h's kMxBiased less its bias of 12) or
// IQ4's (kIq4Biased less 128). Each byte picks from the grid's low or high
// eight by its code's bit 3.
template <int L>
__device__ __forceinline__ uint32_t grid_values(uint32_t codes) {
  constexpr uint32_t t0 = L == kMx ? 0x03020100u : 0xbfad9881u, t1 = L == kMx ? 0x0c080604u : 0xf6eaddcfu;
  constexpr uint32_t t2 = L == kMx ? 0xfdfeff00u : 0x26190d01u, t3 = L == kMx ? 0xf4f8fafcu : 0x71594535u;
  const uint32_t sel = (codes & 0x7u) | ((codes >> 4) & 0x70u) | ((codes >> 8) & 0x700u) | ((codes >> 12) & 0x7000u);
  const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
  const uint32_t high = ((codes >> 3) & 0x01010101u) * 0xffu;
  return (lo & ~high) | (hi & high);
}

// An MXFP4 block's scale from its E8M0 exponent bits, 2^(e - 128)
// (pack_layout.h's mx_scale_bits).
__device__ __forceinline__ float mx_scale(uint32_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The K layouts (model/pack_layout.h): per super-block of 8 blocks the rows'
// fp32 d (and the negated dmin), per block their int8 factors (sc of the
// block or of its first half, then mn or the second half's sc), the nibbles
// as kQ4's at word 8, the high bits in planes at word 72. A value is fed to
// the mma as q - offset (Q6_K: -32..31), exact; Q6_K's halves (a scale per
// 16 values) take one mma each, the other half's registers zero.
template <int L>
struct KShape {
  static constexpr int kPlanes = L == kQ6K ? 2 : L == kQ5K ? 1 : 0;
  static constexpr bool kHalves = L == kQ6K, kMins = L != kQ6K;
  static constexpr int kHeader = kMins ? 32 : 16, kBlock = 72 + 16 * kPlanes, kSuper = kHeader + 8 * kBlock;
};
template <int L>
inline constexpr bool kKLayout = L == kQ4K || L == kQ5K || L == kQ6K;
// Int32 dots per block and row: one per half where a half has its own scale.
template <int L>
inline constexpr int kDots = kHalves<L> || L == kQ6K ? 2 : 1;
// The words a block's float steps read besides its dots (fold): the generic
// layouts' scales and minimums at the block's start; a K layout's
// super-block header (32 words: d, then -dmin where it has minimums) and the
// block's 8 words of int8 factors, kept as 32 + 8.
template <int L>
inline constexpr int kStepWords = kKLayout<L>    ? 40
                                  : L == kQ8HalfMin ? 64
                                  : L == kMx        ? 4
                                  : L == kQ8 || L == kIq4 ? 16
                                                    : 32;  // kQ4, kQ8Min, kQ8Half

// A 16-row group's words, and where block b's values and step words are.
template <int L>
__device__ __forceinline__ const uint32_t* group_words(const uint32_t* words, int64_t group, int64_t nb) {
  if constexpr (kKLayout<L>) return words + group * (nb / 8) * KShape<L>::kSuper;
  else return words + group * nb * kBlockWords<L>;
}
template <int L>
__device__ __forceinline__ const uint32_t* block_words(const uint32_t* gw, int64_t b) {
  if constexpr (kKLayout<L>) return gw + (b / 8) * KShape<L>::kSuper + KShape<L>::kHeader + (b % 8) * KShape<L>::kBlock;
  else return gw + b * kBlockWords<L>;
}
// Step word i (< kStepWords) of block b.
template <int L>
__device__ __forceinline__ uint32_t step_word(const uint32_t* gw, int64_t b, int i) {
  if constexpr (kKLayout<L>)
    return i < 32 ? (i < KShape<L>::kHeader ? gw[(b / 8) * KShape<L>::kSuper + i] : 0u) : block_words<L>(gw, b)[i - 32];
  else return block_words<L>(gw, b)[i];
}

// A lane's words of block b, loaded before any is used (so that the loads
// of several blocks are in flight together): lane (g, t) feeds rows g and
// g + 8 with values 4t..4t+3 and 16+4t..16+4t+3. K layouts: the nibble
// words of vectors t / 2 and 2 + t / 2 (low nibbles for even t, high for
// odd) for both rows, then their plane words (Q5_K: one per row; Q6_K: one
// per row and vector pair).
template <int L>
inline constexpr int kRawWords = L == kQ6K ? 8 : L == kQ5K ? 6 : 4;
template <int L>
struct Raw {
  uint32_t q[kRawWords<L>];
};
template <int L>
__device__ __forceinline__ Raw<L> raw_words(const uint32_t* gw, int64_t b, int g, int t) {
  const uint32_t* wb = block_words<L>(gw, b);
  Raw<L> x;
  if constexpr (kKLayout<L>) {
    const int k0 = t >> 1;
    x.q[0] = wb[8 + 16 * k0 + g], x.q[1] = wb[8 + 16 * k0 + g + 8];
    x.q[2] = wb[8 + 16 * (2 + k0) + g], x.q[3] = wb[8 + 16 * (2 + k0) + g + 8];
    if constexpr (L == kQ5K) x.q[4] = wb[72 + g], x.q[5] = wb[72 + g + 8];
    if constexpr (L == kQ6K) x.q[4] = wb[72 + g], x.q[5] = wb[72 + g + 8], x.q[6] = wb[88 + g], x.q[7] = wb[88 + g + 8];
  } else if constexpr (kNibbles<L>) {
    const int k0 = kNibblesAt<L> + 16 * (t >> 1), k2 = kNibblesAt<L> + 16 * (2 + (t >> 1));
    x.q[0] = wb[k0 + g], x.q[1] = wb[k0 + g + 8], x.q[2] = wb[k2 + g], x.q[3] = wb[k2 + g + 8];
  } else {
    constexpr int v = kValuesAt<L>;
    x.q[0] = wb[v + 16 * t + g], x.q[1] = wb[v + 16 * t + g + 8];
    x.q[2] = wb[v + 16 * (4 + t) + g], x.q[3] = wb[v + 16 * (4 + t) + g + 8];
  }
  return x;
}

// A K layout's four values (nibbles of nib, low when hi == 0) with their
// plane bits (plane >> shift), less the offset, as 4 bytes.
template <int L>
__device__ __forceinline__ uint32_t k_values(uint32_t nib, uint32_t plane, int hi, int shift) {
  uint32_t q = (nib >> (4 * hi)) & 0x0F0F0F0Fu;
  if constexpr (L == kQ5K) q |= ((plane >> shift) & 0x01010101u) << 4;
  if constexpr (L == kQ6K) q = __vsub4(q | (((plane >> shift) & 0x03030303u) << 4), 0x20202020u);
  return q;
}

// Block b's exact int32 dots of the group's 16 rows and 8 tokens from the
// lane's words, one m16n8k32 s8 mma per dot (per half where the layout
// scales halves apart, the other half's registers zero). Lane (g, t) feeds
// token g's B fragment (b0, b1) and gets c[h][0], c[h][1] (row g, tokens 2t,
// 2t + 1) and c[h][2], c[h][3] (row g + 8).
template <int L>
__device__ __forceinline__ void block_dots(const Raw<L>& x, int t, uint32_t b0, uint32_t b1, int (&c)[kDots<L>][4]) {
  uint32_t a[4];
  if constexpr (kKLayout<L>) {
    const int k0 = t >> 1, hi = t & 1;
    // Plane bits of vector k: Q5_K's at bit 2k + hi of the row's word;
    // Q6_K's at 4 (k % 2) + 2 hi of the word of its pair k / 2.
    const int s0 = L == kQ5K ? 2 * k0 + hi : 4 * k0 + 2 * hi, s2 = L == kQ5K ? 2 * (2 + k0) + hi : s0;
    // Each value word's plane word (Q4_K has none; Q5_K one per row).
    uint32_t p[4] = {0u, 0u, 0u, 0u};
    if constexpr (L == kQ5K) p[0] = p[2] = x.q[4], p[1] = p[3] = x.q[5];
    if constexpr (L == kQ6K) p[0] = x.q[4], p[1] = x.q[5], p[2] = x.q[6], p[3] = x.q[7];
    for (int i = 0; i < 4; ++i) a[i] = k_values<L>(x.q[i], p[i], hi, i < 2 ? s0 : s2);
  } else if constexpr (kNibbles<L>) {
    // Values 4t..4t+3: vector t / 2's low (t even) or high nibbles.
    const int sh = 4 * (t & 1);
    for (int i = 0; i < 4; ++i) a[i] = (x.q[i] >> sh) & 0x0F0F0F0Fu;
    if constexpr (L != kQ4)
      for (uint32_t& v : a) v = grid_values<L>(v);
  } else {
    // Signed q from q + 128.
    for (int i = 0; i < 4; ++i) a[i] = x.q[i] ^ 0x80808080u;
  }
  if constexpr (kDots<L> == 2) {
    mma_s8(c[0], a[0], a[1], 0u, 0u, b0, b1);
    mma_s8(c[kDots<L> - 1], 0u, 0u, a[2], a[3], b0, b1);
  } else {
    mma_s8(c[0], a[0], a[1], a[2], a[3], b0, b1);
  }
}

// Block b's B fragment of a token's activations (ab): its values 4t..4t+3
// and 16+4t..16+4t+3; zero where the lane feeds no token.
__device__ __forceinline__ void b_fragment(const Q8* ab, int64_t b, int t, bool feed, uint32_t& b0, uint32_t& b1) {
  b0 = feed ? *reinterpret_cast<const uint32_t*>(ab[b].qs + 4 * t) : 0u;
  b1 = feed ? *reinterpret_cast<const uint32_t*>(ab[b].qs + 16 + 4 * t) : 0u;
}

// One row's float steps for one block and token (a: the token's block's
// scalars), in
// the CPU kernels' order (model/qdot_avx512.cpp): acc = fma(dot, scale * dx,
// acc) per dot, then the minimums' fma(m, the activations' weight, acc): fp16
// s (kQ4, as llama.cpp's Q4_1) or fp32 d * sum (the other layouts; half h's
// sum where the layout has a minimum per half). K layouts: scale = d * sc,
// the minimum -dmin * mn. `w(i)` reads the block's step word i (kStepWords).
template <int L, class W>
__device__ __forceinline__ float fold(float acc, int c0, int c1, const W& w, int r, const Q8Head& a) {
  if constexpr (kKLayout<L>) {
    const auto f = [&](int i) { return float(static_cast<signed char>((w(32 + i / 4) >> (8 * (i % 4))) & 0xffu)); };
    const float d = __uint_as_float(w(r));
    acc = fmaf(__int2float_rn(c0), __fmul_rn(__fmul_rn(d, f(r)), a.d), acc);
    if constexpr (KShape<L>::kHalves) acc = fmaf(__int2float_rn(c1), __fmul_rn(__fmul_rn(d, f(16 + r)), a.d), acc);
    if constexpr (KShape<L>::kMins) acc = fmaf(__fmul_rn(__uint_as_float(w(16 + r)), f(16 + r)), a.ds, acc);
  } else if constexpr (kHalves<L>) {
    acc = fmaf(__int2float_rn(c0), __fmul_rn(__uint_as_float(w(r)), a.d), acc);
    acc = fmaf(__int2float_rn(c1), __fmul_rn(__uint_as_float(w(16 + r)), a.d), acc);
    if constexpr (L == kQ8HalfMin) {
      acc = fmaf(__uint_as_float(w(32 + r)), __fmul_rn(a.d, __int2float_rn(a.sum_lo)), acc);
      acc = fmaf(__uint_as_float(w(48 + r)), __fmul_rn(a.d, __int2float_rn(a.sum - a.sum_lo)), acc);
    }
  } else if constexpr (L == kMx) {
    // The rows' E8M0 exponents, row r at byte r of words 0..3.
    acc = fmaf(__int2float_rn(c0), __fmul_rn(mx_scale((w(r / 4) >> (8 * (r % 4))) & 0xffu), a.d), acc);
  } else {
    acc = fmaf(__int2float_rn(c0), __fmul_rn(__uint_as_float(w(r)), a.d), acc);
    if constexpr (L == kQ4 || L == kQ8Min) acc = fmaf(__uint_as_float(w(16 + r)), L == kQ4 ? a.s : a.ds, acc);
  }
  return acc;
}

// The matrices of one launch: up to kMaxMats of one layout and row length,
// multiplied by the same activations (a layer's q, k and v; its gate and
// up), their 16-row groups numbered one after another across them (end[i]:
// the groups of matrices 0..i). One launch where there were several, and
// the small ones (k, v) fill multiprocessors beside the large.
struct Mats {
  const uint32_t* words[kMaxMats];
  float* y[kMaxMats];
  int64_t rows[kMaxMats];
  int end[kMaxMats];
  int n;
};
// Where global group G is: its matrix's group `group`, words, y and rows.
struct Located {
  const uint32_t* gw;
  float* y;
  int64_t rows, group;
};
template <int L>
__device__ __forceinline__ Located locate(const Mats& m, int G, int64_t nb) {
  const uint32_t* w = m.words[0];
  float* y = m.y[0];
  int64_t rows = m.rows[0];
  int before = 0;
#pragma unroll
  for (int j = 1; j < kMaxMats; ++j)  // constant indices: the parameters stay where they are
    if (j < m.n && G >= m.end[j - 1]) w = m.words[j], y = m.y[j], rows = m.rows[j], before = m.end[j - 1];
  return {group_words<L>(w, G - before, nb), y, rows, G - before};
}

// A warp's share of the tile kernel: lane (g, t) = (lane / 4, lane % 4)
// feeds token tok0 + g's activations (B) and holds the outputs of rows g and
// g + 8 for tokens tok0 + 2t and tok0 + 2t + 1 (acc[0], acc[1] row g; acc[2],
// acc[3] row g + 8), summed block by block with fold's steps.
struct WarpTile {
  int g, t, tok0, n_tok;
  int64_t nb;
  const Q8 *ab, *a0, *a1;
  bool feed;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  __device__ WarpTile(const Q8* acts, int64_t nb_, int n_tok_)
      : g((threadIdx.x & 31) >> 2), t(threadIdx.x & 3), n_tok(n_tok_), nb(nb_) {
    tok0 = (int(blockIdx.y) * int(blockDim.x >> 5) + int(threadIdx.x >> 5)) * 8;
    feed = tok0 + g < n_tok;
    ab = acts + int64_t(feed ? tok0 + g : 0) * nb;
    a0 = acts + int64_t(min(tok0 + 2 * t, n_tok - 1)) * nb;
    a1 = acts + int64_t(min(tok0 + 2 * t + 1, n_tok - 1)) * nb;
  }
  __device__ bool idle() const { return tok0 >= n_tok; }
  __device__ void activations(int64_t b, uint32_t& b0, uint32_t& b1) const { b_fragment(ab, b, t, feed, b0, b1); }
  // Block b's dots and float steps, its words those of block `at` of gw
  // (the group's words, or a chunk of them in shared memory).
  template <int L>
  __device__ void add_block(const uint32_t* gw, int64_t at, int64_t b) {
    uint32_t b0, b1;
    activations(b, b0, b1);
    int c[kDots<L>][4];
    block_dots<L>(raw_words<L>(gw, at, g, t), t, b0, b1, c);
    const auto w = [&](int i) { return step_word<L>(gw, at, i); };
    for (int j = 0; j < 4; ++j)
      acc[j] = fold<L>(acc[j], c[0][j], c[kDots<L> - 1][j], w, g + 8 * (j >> 1), (j & 1 ? a1 : a0)[b]);
  }
  __device__ void store(float* y, int64_t rows, int64_t group) const {
    const int64_t r0 = group * 16 + g, r1 = r0 + 8;
    const int tc0 = tok0 + 2 * t, tc1 = tc0 + 1;
    if (tc0 < n_tok) {
      if (r0 < rows) y[int64_t(tc0) * rows + r0] = acc[0];
      if (r1 < rows) y[int64_t(tc0) * rows + r1] = acc[2];
    }
    if (tc1 < n_tok) {
      if (r0 < rows) y[int64_t(tc1) * rows + r0] = acc[1];
      if (r1 < rows) y[int64_t(tc1) * rows + r1] = acc[3];
    }
  }
};

// One warp per (group of 16 rows, tile of 8 tokens), block after block: the
// mma's dots, then fold's steps for the lane's 4 outputs. For prefill's many
// tokens, and batches on matrices of many groups (matmul_as; a warp's tile
// shares its group's words with the CTA's other warps).
template <int L>
__global__ void __launch_bounds__(128) tile_kernel(const Mats m, int64_t nb, const Q8* __restrict__ acts, int n_tok) {
  WarpTile tile(acts, nb, n_tok);
  if (tile.idle()) return;
  const Located at = locate<L>(m, int(blockIdx.x), nb);
  for (int64_t b = 0; b < nb; ++b) tile.add_block<L>(at.gw, b, b);
  tile.store(at.y, at.rows, at.group);
}

// Decode's few tokens: a row's steps are a chain through its blocks in
// order, but its dots are not, so the CTA of a 16-row group splits them.
// kProducers warps take a chunk of blocks at once (each kChunk / kProducers
// blocks, their words loaded a chunk ahead, so that a chunk's loads are in
// flight while the one before is worked), putting each block's dots and step
// words in shared memory; meanwhile kFolders warps (a thread per row and
// token) run fold's chain through the chunk before, double-buffered. One warp
// walking all of a group's blocks (tile_kernel) waited on memory at every
// block: 3x slower on the H200 (docs/benchmarks.md).
constexpr int kProducers = 8, kFolders = 4, kSplitTokens = 8;
// Up to 8 tokens, and up to a batch of 32 sequences' decode where the matrix
// has few groups (no more than the H100's and H200's 132 SMs): there the tile
// kernel has too few warps for a long row; with many groups it has enough,
// and the split kernel's 8-token slices each reading the group cost more
// (H200: a 2048 x 8192 Q4_K matrix at 32 tokens 1.23x faster split, 8192 x
// 2048 0.42x). Prefill's many tokens keep the tile kernel.
constexpr int kSplitMost = 32, kFewGroups = 128;
template <int L>
inline constexpr int kChunk = 32 / kDots<L>;

// Block e's dots c (lane (g, t): rows g and g + 8, tokens 2t and 2t + 1)
// into the chunk's shared dots, [e][half][token][row].
template <int C, int D>
__device__ __forceinline__ void put_dots(int (&dots)[C][D][kSplitTokens][16], int e, const int (&c)[D][4], int g,
                                         int t) {
  for (int h = 0; h < D; ++h) {
    dots[e][h][2 * t][g] = c[h][0];
    dots[e][h][2 * t + 1][g] = c[h][1];
    dots[e][h][2 * t][g + 8] = c[h][2];
    dots[e][h][2 * t + 1][g + 8] = c[h][3];
  }
}

template <int L>
__global__ void __launch_bounds__(32 * (kProducers + kFolders))
    split_kernel(const Mats m, int64_t nb, const Q8* __restrict__ acts, int n_tok) {
  constexpr int C = kChunk<L>, D = kDots<L>, S = kStepWords<L>;
  // This CTA's 8 tokens (grid.y: 8 at a time; a matrix's words are read
  // from memory once and from L2 for the rest).
  const Located at = locate<L>(m, int(blockIdx.x), nb);
  acts += int64_t(blockIdx.y) * kSplitTokens * nb;
  float* const y = at.y + int64_t(blockIdx.y) * kSplitTokens * at.rows;
  n_tok = min(kSplitTokens, n_tok - int(blockIdx.y) * kSplitTokens);
  __shared__ int dots[2][C][D][kSplitTokens][16];
  __shared__ uint32_t steps[2][C][S];
  const uint32_t* gw = at.gw;
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
  const bool feed = g < n_tok;
  const Q8* ab = acts + (feed ? g : 0) * nb;
  const int f = int(threadIdx.x) - 32 * kProducers, r = f & 15, k = f >> 4;
  const bool folds = f >= 0 && k < n_tok;
  const Q8* ak = acts + (folds ? k : 0) * nb;
  const int64_t chunks = (nb + C - 1) / C;
  float acc = 0.0f;
  // A producer's blocks of chunk i: its words, B fragments and step words,
  // loaded for chunk i + 1 before chunk i's are used (a chunk ahead).
  constexpr int kPer = C / kProducers, kSteps = (S + 31) / 32;
  struct Loaded {
    Raw<L> raw[kPer];
    uint32_t b0[kPer], b1[kPer], step[kPer][kSteps];
  };
  const auto load = [&](int64_t i, Loaded& x) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int64_t b = i * C + j * kProducers + warp;
      if (b >= nb) continue;
      x.raw[j] = raw_words<L>(gw, b, g, t);
      b_fragment(ab, b, t, feed, x.b0[j], x.b1[j]);
#pragma unroll
      for (int s = 0; s < kSteps; ++s)
        if (lane + 32 * s < S) x.step[j][s] = step_word<L>(gw, b, lane + 32 * s);
    }
  };
  Loaded cur, next;
  if (warp < kProducers) load(0, cur);
  for (int64_t i = 0; i <= chunks; ++i) {
    if (warp < kProducers) {
      if (i < chunks) {
        if (i + 1 < chunks) load(i + 1, next);
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int e = j * kProducers + warp;
          if (i * C + e >= nb) continue;
          int c[D][4];
          block_dots<L>(cur.raw[j], t, cur.b0[j], cur.b1[j], c);
#pragma unroll
          for (int s = 0; s < kSteps; ++s)
            if (lane + 32 * s < S) steps[i & 1][e][lane + 32 * s] = cur.step[j][s];
          put_dots(dots[i & 1], e, c, g, t);
        }
        cur = next;
      }
    } else if (folds && i > 0) {
      const int64_t b0 = (i - 1) * C;
      const int n = nb - b0 < C ? int(nb - b0) : C;
      const int buf = int((i - 1) & 1);
#pragma unroll 8
      for (int e = 0; e < n; ++e) {
        const auto w = [&](int x) { return steps[buf][e][x]; };
        acc = fold<L>(acc, dots[buf][e][0][k][r], dots[buf][e][D - 1][k][r], w, r, ak[b0 + e]);
      }
    }
    __syncthreads();
  }
  const int64_t row = at.group * 16 + r;
  if (folds && row < at.rows) y[int64_t(k) * at.rows + row] = acc;
}

// The stream and staged kernels' rings, below: slots of one chunk each. A
// chunk's words are contiguous in every layout (a K layout's chunk is whole
// super-blocks; the others' blocks are consecutive): span_words of `blocks`
// blocks from a chunk's start, kUnitWords of a whole chunk.
template <int L>
__host__ __device__ constexpr int64_t span_words(int64_t blocks) {
  if constexpr (kKLayout<L>) return blocks / 8 * KShape<L>::kSuper;
  else return blocks * kBlockWords<L>;
}
template <int L>
inline constexpr int kUnitWords = int(span_words<L>(kChunk<L>));
// The blocks of chunk i of a row of nb blocks (the last may be short).
template <int L>
__device__ __forceinline__ int chunk_blocks(int64_t nb, int i) {
  const int64_t left = nb - int64_t(i) * kChunk<L>;
  return left < kChunk<L> ? int(left) : kChunk<L>;
}
// Slots: as many as ~64 KiB holds, 3 to 8 (two stream CTAs an SM with
// their dots, or three staged ones, then fit the H100's and H200's 228 KiB).
template <int L>
inline constexpr int kStages = std::clamp(65536 / (4 * kUnitWords<L>), 3, 8);
constexpr int kStreamThreads = 32 * (kProducers + kFolders);

#include "base/cp_async.inc"

// Chunk i of a group's words (gw) into a ring slot, by the CTA's threads,
// then its group committed. The rings count one group a chunk, so past the
// last chunk the callers commit an empty group instead.
template <int L>
__device__ __forceinline__ void copy_chunk(const uint32_t* gw, int64_t nb, int i, uint32_t* slot) {
  const uint32_t* src = gw + span_words<L>(int64_t(i) * kChunk<L>);
  const int n = int(span_words<L>(chunk_blocks<L>(nb, i)) / 4);
  for (int p = int(threadIdx.x); p < n; p += int(blockDim.x)) cp_async16(slot + 4 * p, src + 4 * p, 16);
  cp_async_commit();
}

// Decode's few tokens, streamed. The split kernel's CTA holds one chunk of
// its group's words in flight while it works the chunk before, one CTA an
// SM (its registers), and a matrix of more groups than SMs runs in waves,
// each starting from an empty pipe. Here a CTA is persistent (grid: two per
// SM, or one per item where fewer) and walks its items (a 16-row group and
// an 8-token slice: items c, c + grid, ..., so that the CTAs at work at
// once read neighbouring groups, each group's slices together) chunk after
// chunk as one stream of units (chunks), copied by cp.async into a ring of
// kStages slots, kStages - 2 units ahead of the one being worked. Each unit is then the split kernel's
// chunk: kProducers warps take its blocks' dots by the mma (their
// activations, B fragments and the heads fold reads, loaded from L2 a unit
// ahead) into shared memory; kFolders warps run fold's chain through the
// unit before, reading its step words from its slot, which no copy refills
// until the barrier after. So each row's float steps are the split kernel's
// and the CPU's, in block order; only where the bytes wait differs.
template <int L>
__global__ void __launch_bounds__(kStreamThreads, 2)
    stream_kernel(const Mats m, int64_t nb, const Q8* __restrict__ acts, int n_tok) {
  constexpr int C = kChunk<L>, D = kDots<L>, U = kUnitWords<L>, S = kStages<L>, kPer = C / kProducers;
  extern __shared__ __align__(16) uint32_t ring[];  // S slots of U words
  __shared__ int dots[2][C][D][kSplitTokens][16];
  __shared__ Q8Head heads[2][C][kSplitTokens];
  // (Counts in 32 bits, the units' indexing being done per unit by every
  // thread: a matrix's items and chunks are far fewer than 2^31.)
  const int slices = (n_tok + kSplitTokens - 1) / kSplitTokens;
  const int items = m.end[m.n - 1] * slices, chunks = int((nb + C - 1) / C);
  const int first = int(blockIdx.x), step = int(gridDim.x);
  const int units = first < items ? ((items - 1 - first) / step + 1) * chunks : 0;
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
  const int f = int(threadIdx.x) - 32 * kProducers, r = f & 15, k = f >> 4;
  // Unit u: item first + (u / chunks) * step, chunk u % chunks; of the
  // item, group item / slices and tokens 8 (item % slices) on.
  struct Unit {
    int group, chunk, tok0, n_tok, blocks;
  };
  const auto unit = [&](int u) {
    const int item = first + (u / chunks) * step;
    Unit x;
    x.group = item / slices, x.chunk = u % chunks;
    x.tok0 = (item - x.group * slices) * kSplitTokens;
    x.n_tok = min(kSplitTokens, n_tok - x.tok0);
    x.blocks = chunk_blocks<L>(nb, x.chunk);
    return x;
  };
  // Unit u's words into slot u % S, by every thread; a group committed
  // whether or not (past the last unit) it copies anything.
  const auto issue = [&](int u) {
    if (u >= units) return cp_async_commit();
    const Unit x = unit(u);
    copy_chunk<L>(locate<L>(m, x.group, nb).gw, nb, x.chunk, ring + (u % S) * U);
  };
  // A producer's activations for its blocks of unit u (token g of the
  // unit's slice): B fragments, and head words t and 4 for fold.
  struct Ahead {
    uint32_t b0[kPer], b1[kPer], h[kPer], h4[kPer];
  };
  const auto load = [&](int u, Ahead& a) {
    if (u >= units) return;
    const Unit x = unit(u);
    const bool feed = g < x.n_tok;
    const Q8* ab = acts + int64_t(x.tok0 + (feed ? g : 0)) * nb;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = j * kProducers + warp;
      if (e >= x.blocks) continue;
      const int64_t b = int64_t(x.chunk) * C + e;
      b_fragment(ab, b, t, feed, a.b0[j], a.b1[j]);
      const uint32_t* hw = reinterpret_cast<const uint32_t*>(ab + b);
      a.h[j] = hw[t], a.h4[j] = hw[4];
    }
  };
  for (int u = 0; u < S - 2; ++u) issue(u);
  Ahead cur, next;
  if (warp < kProducers) load(0, cur);
  float acc = 0.0f;
  for (int u = 0; u <= units; ++u) {
    cp_async_wait<S - 3>();  // unit u's copies, this thread's
    __syncthreads();         // everyone's; and unit u - 2's slot and dots read
    issue(u + S - 2);
    if (warp < kProducers) {
      if (u < units) {
        load(u + 1, next);
        const Unit x = unit(u);
        const uint32_t* slot = ring + (u % S) * U;
        const int buf = u & 1;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int e = j * kProducers + warp;
          if (e >= x.blocks) continue;
          int c[D][4];
          block_dots<L>(raw_words<L>(slot, e, g, t), t, cur.b0[j], cur.b1[j], c);
          put_dots(dots[buf], e, c, g, t);
          Q8Head& hd = heads[buf][e][g];  // word t of the four lanes, and 4
          const uint32_t v = cur.h[j];
          if (t == 0) hd.d = __uint_as_float(v), hd.ds = __uint_as_float(cur.h4[j]);
          else if (t == 1) hd.s = __uint_as_float(v);
          else if (t == 2) hd.sum = int(v);
          else hd.sum_lo = int(v);
        }
        cur = next;
      }
    } else if (u > 0) {
      const Unit x = unit(u - 1);
      if (k < x.n_tok) {
        const uint32_t* slot = ring + ((u - 1) % S) * U;
        const int buf = (u - 1) & 1;
        if (x.chunk == 0) acc = 0.0f;
#pragma unroll 8
        for (int e = 0; e < x.blocks; ++e) {
          const auto w = [&](int i) { return step_word<L>(slot, e, i); };
          acc = fold<L>(acc, dots[buf][e][0][k][r], dots[buf][e][D - 1][k][r], w, r, heads[buf][e][k]);
        }
        if (x.chunk == chunks - 1) {
          const Located at = locate<L>(m, x.group, nb);
          const int64_t row = at.group * 16 + r;
          if (row < at.rows) at.y[int64_t(x.tok0 + k) * at.rows + row] = acc;
        }
      }
    }
  }
}

// Prefill's many tokens, staged: tile_kernel's warps (a warp per 8 tokens,
// each lane's 4 outputs summed block by block with fold's steps, so its
// float steps and the CPU's), kStagedWarps of them on one group, fed from
// shared memory. tile_kernel's warp loads each block's words and then waits
// on them, at every block; here the CTA copies its group's chunks by
// cp.async into a ring of kStages slots, kStages - 1 chunks ahead, and its
// warps read a chunk's words from its slot while the next chunks are on
// their way. The activations come from L2 (a group's CTAs read its words
// once from memory and share them there too).
constexpr int kStagedWarps = 8;

template <int L>
__global__ void __launch_bounds__(32 * kStagedWarps, 3)
    staged_kernel(const Mats m, int64_t nb, const Q8* __restrict__ acts, int n_tok) {
  constexpr int C = kChunk<L>, U = kUnitWords<L>, S = kStages<L>;
  extern __shared__ __align__(16) uint32_t ring[];  // S slots of U words
  WarpTile tile(acts, nb, n_tok);
  const Located at = locate<L>(m, int(blockIdx.x), nb);
  const uint32_t* gw = at.gw;
  const int chunks = int((nb + C - 1) / C);
  // Chunk i's words into slot i % S, by every thread (idle warps too).
  const auto issue = [&](int i) {
    if (i >= chunks) return cp_async_commit();
    copy_chunk<L>(gw, nb, i, ring + (i % S) * U);
  };
  for (int i = 0; i < S - 1; ++i) issue(i);
  for (int i = 0; i < chunks; ++i) {
    cp_async_wait<S - 2>();  // chunk i's copies, this thread's
    __syncthreads();         // everyone's; and chunk i - 1's slot read
    issue(i + S - 1);
    if (tile.idle()) continue;
    const uint32_t* slot = ring + (i % S) * U;
    const int n = chunk_blocks<L>(nb, i);
#pragma unroll 4
    for (int e = 0; e < n; ++e) tile.add_block<L>(slot, e, int64_t(i) * C + e);
  }
  if (!tile.idle()) tile.store(at.y, at.rows, at.group);
}

// Float matrices: a warp per kFloatRows rows and up to kFloatTokens tokens
// (each x value read once for all the rows), lane j adding the products of
// columns j, j + 32, ... by fma in column order (each element widened
// exactly to fp32), then the lanes' sums added by halves (16, 8, 4, 2, 1):
// the CPU's float kernels' steps (model/matmul.cpp, finish_lanes), so a row's result is the CPU's
// and never depends on the batch around it.
constexpr int kFloatRows = 8, kFloatTokens = 8;

template <int K>
__device__ __forceinline__ float element(const void* w, int64_t i) {
  if constexpr (K == kF32) return static_cast<const float*>(w)[i];
  else if constexpr (K == kF16) return __half2float(static_cast<const __half*>(w)[i]);
  else return __uint_as_float(uint32_t(static_cast<const unsigned short*>(w)[i]) << 16);
}

template <int K>
__global__ void float_matmul_kernel(const void* w, int64_t rows, int64_t cols, const float* x, int n_tok, float* y) {
  const int lane = threadIdx.x & 31;
  const int64_t r0 = int64_t(blockIdx.x) * kFloatRows;
  const int t0 = int(blockIdx.y) * kFloatTokens;
  // The same for every lane.
  const int nr = rows - r0 < kFloatRows ? int(rows - r0) : kFloatRows;
  const int nt = n_tok - t0 < kFloatTokens ? n_tok - t0 : kFloatTokens;
  // Constant bounds, so the accumulators stay in registers.
  float acc[kFloatRows][kFloatTokens];
  for (int i = 0; i < kFloatRows; ++i)
    for (int t = 0; t < kFloatTokens; ++t) acc[i][t] = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    float wv[kFloatRows];
    for (int i = 0; i < kFloatRows; ++i) wv[i] = i < nr ? element<K>(w, (r0 + i) * cols + c) : 0.0f;
    for (int t = 0; t < kFloatTokens; ++t)
      if (t < nt) {
        const float xv = x[int64_t(t0 + t) * cols + c];
        for (int i = 0; i < kFloatRows; ++i) acc[i][t] = __fmaf_rn(wv[i], xv, acc[i][t]);
      }
  }
  // The lanes' sums by halves, each output's by one lane from shared memory
  // (one barrier, where shuffles would take five per output).
  __shared__ float part[kFloatRows * kFloatTokens][33];
  for (int i = 0; i < kFloatRows; ++i)
    for (int t = 0; t < kFloatTokens; ++t) part[i * kFloatTokens + t][lane] = acc[i][t];
  __syncthreads();
  for (int o = lane; o < kFloatRows * kFloatTokens; o += 32) {
    const int i = o / kFloatTokens, t = o % kFloatTokens;
    if (i >= nr || t >= nt) continue;
    float v[32];
    for (int j = 0; j < 32; ++j) v[j] = part[o][j];
    for (int h = 16; h >= 1; h >>= 1)
      for (int j = 0; j < h; ++j) v[j] = __fadd_rn(v[j], v[j + h]);
    y[int64_t(t0 + t) * rows + r0 + i] = v[0];
  }
}

}  // namespace

void float_matmul(int kind, const void* w, int64_t rows, int64_t cols, const float* x, int n_tok, float* y) {
  if (rows <= 0 || n_tok <= 0) return;
  const dim3 grid(unsigned((rows + kFloatRows - 1) / kFloatRows), unsigned((n_tok + kFloatTokens - 1) / kFloatTokens));
  auto* kernel = kind == kF32 ? float_matmul_kernel<kF32> : kind == kF16 ? float_matmul_kernel<kF16>
                                                                           : float_matmul_kernel<kBF16>;
  launch("the float matmul", kernel, grid, 32, w, rows, cols, x, n_tok, y);
}

void quantize_q8(const float* x, int64_t blocks, void* acts) {
  if (blocks <= 0) return;
  constexpr int kThreads = 256;  // 8 blocks of 32 per CTA
  const int64_t ctas = (blocks * 32 + kThreads - 1) / kThreads;
  launch("quantizing activations", quantize_kernel, unsigned(ctas), kThreads, x, blocks, static_cast<Q8*>(acts));
}

namespace {

// CHUNKSERVE_CUDA_MATMUL: the kernels kAuto runs, for the A/B of one
// binary (docs/benchmarks.md): "FEW,MANY" names the kernel of decode's few
// tokens (up to kSplitTokens, or kSplitMost on a matrix of at most
// kFewGroups groups) and the one of the rest (prefill), each tile, split,
// stream or staged; one name alone runs every product on that kernel.
// Unset: split,tile, the fastest measured so far.
struct Choice {
  int few = kSplit, many = kTile;
};
int kernel_named(std::string_view v) {
  return v == "tile" ? kTile : v == "split" ? kSplit : v == "stream" ? kStream : v == "staged" ? kStaged : -1;
}
Choice choice() {
  static const Choice c = [] {
    Choice x;
    const char* e = std::getenv("CHUNKSERVE_CUDA_MATMUL");
    if (!e) return x;
    const std::string_view v = e;
    const size_t comma = v.find(',');
    const int few = kernel_named(v.substr(0, comma));
    const int many = comma == std::string_view::npos ? few : kernel_named(v.substr(comma + 1));
    if (few < 0 || many < 0)
      throw Error("CHUNKSERVE_CUDA_MATMUL: '" + std::string(v) +
                  "' is not a kernel (tile, split, stream, staged) or two of them, few tokens' then many's");
    x.few = few, x.many = many;
    return x;
  }();
  return c;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      throw Error("CUDA matmul: cannot read the device's number of multiprocessors");
    return v;
  }();
  return n;
}

// Raises a kernel's dynamic shared memory limit to `bytes`, once.
template <class K>
void allow_smem(K* kernel, int bytes, const char* what) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("CUDA matmul: cannot configure the ") + what + ": " + cudaGetErrorString(e));
  }
}

template <int L>
void matmul_as(const Mats& m, int64_t nb, const Q8* a, int n_tok, int kernel) {
  const unsigned groups = unsigned(m.end[m.n - 1]);
  if (kernel == kAuto) {
    // The rule as measured on one matrix at a time: by the largest here.
    int most = m.end[0];
    for (int i = 1; i < m.n; ++i) most = std::max(most, m.end[i] - m.end[i - 1]);
    const Choice c = choice();
    const bool few = n_tok <= kSplitTokens || (n_tok <= kSplitMost && most <= kFewGroups);
    kernel = few ? c.few : c.many;
  }
  constexpr int ring = kStages<L> * kUnitWords<L> * 4;  // the stream and staged kernels' slots, bytes
  if (kernel == kStream) {
    static const bool configured = (allow_smem(stream_kernel<L>, ring, "stream kernel"), true);
    (void)configured;
    const int64_t items = int64_t(groups) * ((n_tok + kSplitTokens - 1) / kSplitTokens);
    const unsigned grid = unsigned(std::min<int64_t>(items, 2 * int64_t(sm_count())));
    launch_ex("the quantized matmul", stream_kernel<L>, grid, kStreamThreads, size_t(ring), false, m, nb, a, n_tok);
    return;
  }
  if (kernel == kSplit) {
    const dim3 grid(groups, unsigned((n_tok + kSplitTokens - 1) / kSplitTokens));
    launch("the quantized matmul", split_kernel<L>, grid, 32 * (kProducers + kFolders), m, nb, a, n_tok);
    return;
  }
  const int tiles = (n_tok + 7) / 8;
  if (kernel == kStaged) {
    static const bool configured = (allow_smem(staged_kernel<L>, ring, "staged kernel"), true);
    (void)configured;
    const int warps = std::min(kStagedWarps, tiles);
    const dim3 grid(groups, unsigned((tiles + warps - 1) / warps));
    launch_ex("the quantized matmul", staged_kernel<L>, grid, 32 * warps, size_t(ring), false, m, nb, a, n_tok);
    return;
  }
  const int warps = std::min(4, tiles);
  const dim3 grid(groups, unsigned((tiles + warps - 1) / warps));
  launch("the quantized matmul", tile_kernel<L>, grid, 32 * warps, m, nb, a, n_tok);
}

}  // namespace

void matmul_many(int layout, int n, const uint32_t* const* words, const int64_t* rows, int64_t nb, const void* acts,
                 int n_tok, float* const* y, int kernel) {
  if (n_tok <= 0) return;
  for (int first = 0; first < n; first += kMaxMats) {
    Mats m{};
    for (int i = first; i < n && m.n < kMaxMats; ++i) {
      if (rows[i] <= 0) continue;
      m.words[m.n] = words[i], m.y[m.n] = y[i], m.rows[m.n] = rows[i];
      m.end[m.n] = (m.n ? m.end[m.n - 1] : 0) + int((rows[i] + 15) / 16);
      ++m.n;
    }
    if (m.n == 0) continue;
    const auto* a = static_cast<const Q8*>(acts);
    auto* run = layout == kQ4          ? matmul_as<kQ4>
                : layout == kQ8        ? matmul_as<kQ8>
                : layout == kQ8Min     ? matmul_as<kQ8Min>
                : layout == kQ8Half    ? matmul_as<kQ8Half>
                : layout == kQ8HalfMin ? matmul_as<kQ8HalfMin>
                : layout == kMx        ? matmul_as<kMx>
                : layout == kIq4       ? matmul_as<kIq4>
                : layout == kQ4K       ? matmul_as<kQ4K>
                : layout == kQ5K       ? matmul_as<kQ5K>
                                       : matmul_as<kQ6K>;
    run(m, nb, a, n_tok, kernel);
  }
}

void matmul(int layout, const uint32_t* words, int64_t rows, int64_t nb, const void* acts, int n_tok, float* y,
            int kernel) {
  matmul_many(layout, 1, &words, &rows, nb, acts, n_tok, &y, kernel);
}

}  // namespace cs::cuda::kernels
