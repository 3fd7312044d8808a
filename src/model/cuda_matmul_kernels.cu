// The device matmul's kernels (model/cuda_matmul.h): activation quantization
// and the 16-row layouts' products, each float step the CPU kernels' own
// (model/qdot_avx512.cpp, model/matmul.cpp quantize_q8), written with the
// _rn intrinsics so that nvcc neither contracts nor reorders them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "base/cuda.h"
#include "model/cuda_matmul_kernels.h"

namespace cs::cuda::kernels {
namespace {

struct Q8 {
  float d, s;
  int sum, sum_lo;
  float ds;
  signed char qs[32];
};
static_assert(sizeof(Q8) == kBlockBytes, "BlockQ8's layout");

constexpr unsigned kAll = 0xffffffffu;

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


// One warp per block of 32 values, lane i holding value i: quantize_q8's
// steps (d = amax / 127, q = round-to-even(x * (127 / amax)), d kept in fp16,
// s = fp16(d * sum) with the unrounded d, ds = fp16 d * sum in fp32).
__global__ void quantize_kernel(const float* __restrict__ x, int64_t blocks, Q8* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (b >= blocks) return;  // the whole warp: b is the same for its lanes
  const float v = x[b * 32 + lane];
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  const int q = __float2int_rn(__fmul_rn(v, id));
  int sum = q, lo = lane < 16 ? q : 0;
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(kAll, sum, o);
    lo += __shfl_xor_sync(kAll, lo, o);
  }
  out[b].qs[lane] = static_cast<signed char>(q);
  if (lane == 0) {
    const float d16 = __half2float(__float2half_rn(d));
    out[b].d = d16;
    out[b].sum = sum;
    out[b].sum_lo = lo;
    out[b].ds = __fmul_rn(d16, float(sum));
    out[b].s = __half2float(__float2half_rn(__fmul_rn(d, float(sum))));
  }
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

// A warp's share of both kernels: lane (g, t) = (lane / 4, lane % 4) feeds
// token tok0 + g's activations (B) and holds the outputs of rows g and g + 8
// for tokens tok0 + 2t and tok0 + 2t + 1 (C: acc[0], acc[1] row g; acc[2],
// acc[3] row g + 8), summed block by block with the CPU kernels' steps.
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
  // Block b's B fragment: token g's values 4t..4t+3 and 16+4t..16+4t+3.
  __device__ void activations(int64_t b, uint32_t& b0, uint32_t& b1) const {
    b0 = b1 = 0;
    if (!feed) return;
    b0 = *reinterpret_cast<const uint32_t*>(ab[b].qs + 4 * t);
    b1 = *reinterpret_cast<const uint32_t*>(ab[b].qs + 16 + 4 * t);
  }
  // acc = fma(dot, scale * dx, acc), scales s0 (row g) and s1 (row g + 8).
  __device__ void add_dots(const int (&c)[4], float s0, float s1, int64_t b) {
    const float ad0 = a0[b].d, ad1 = a1[b].d;
    acc[0] = fmaf(__int2float_rn(c[0]), __fmul_rn(s0, ad0), acc[0]);
    acc[1] = fmaf(__int2float_rn(c[1]), __fmul_rn(s0, ad1), acc[1]);
    acc[2] = fmaf(__int2float_rn(c[2]), __fmul_rn(s1, ad0), acc[2]);
    acc[3] = fmaf(__int2float_rn(c[3]), __fmul_rn(s1, ad1), acc[3]);
  }
  // acc = fma(m, the activations' weight, acc): fp16 s (kQ4, as llama.cpp's
  // Q4_1) or fp32 d * sum (the other layouts; half h's sum where the layout
  // has a minimum per half: min_weights).
  __device__ void add_mins(float m0, float m1, int64_t b, bool fp16_s) {
    const float w0 = fp16_s ? a0[b].s : a0[b].ds, w1 = fp16_s ? a1[b].s : a1[b].ds;
    acc[0] = fmaf(m0, w0, acc[0]);
    acc[1] = fmaf(m0, w1, acc[1]);
    acc[2] = fmaf(m1, w0, acc[2]);
    acc[3] = fmaf(m1, w1, acc[3]);
  }
  __device__ void add_half_mins(float m0, float m1, int64_t b, int h) {
    const int s0 = h == 0 ? a0[b].sum_lo : a0[b].sum - a0[b].sum_lo, s1 = h == 0 ? a1[b].sum_lo : a1[b].sum - a1[b].sum_lo;
    const float w0 = __fmul_rn(a0[b].d, __int2float_rn(s0)), w1 = __fmul_rn(a1[b].d, __int2float_rn(s1));
    acc[0] = fmaf(m0, w0, acc[0]);
    acc[1] = fmaf(m0, w1, acc[1]);
    acc[2] = fmaf(m1, w0, acc[2]);
    acc[3] = fmaf(m1, w1, acc[3]);
  }
  __device__ void store(float* y, int64_t rows) const {
    const int64_t r0 = int64_t(blockIdx.x) * 16 + g, r1 = r0 + 8;
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

// One warp per (group of 16 rows, tile of 8 tokens); per block of 32 values
// in order, one m16n8k32 s8 mma gives the 16 x 8 exact int32 dots. Lane
// (g, t) feeds rows g and g + 8, values 4t..4t+3 and 16+4t..16+4t+3 (A);
// WarpTile does the rest.
template <int L>
__global__ void __launch_bounds__(128) matmul_kernel(const uint32_t* __restrict__ words, int64_t rows, int64_t nb,
                                                     const Q8* __restrict__ acts, int n_tok, float* __restrict__ y) {
  constexpr int kWords = kBlockWords<L>;
  WarpTile tile(acts, nb, n_tok);
  if (tile.idle()) return;
  const int g = tile.g, t = tile.t;
  const uint32_t* w = words + int64_t(blockIdx.x) * nb * kWords;
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t* wb = w + b * kWords;
    uint32_t a[4];
    if constexpr (kNibbles<L>) {
      // Values 4t..4t+3: vector t / 2's low (t even) or high nibbles.
      const int sh = 4 * (t & 1), k0 = kNibblesAt<L> + 16 * (t >> 1), k2 = kNibblesAt<L> + 16 * (2 + (t >> 1));
      a[0] = (wb[k0 + g] >> sh) & 0x0F0F0F0Fu;
      a[1] = (wb[k0 + g + 8] >> sh) & 0x0F0F0F0Fu;
      a[2] = (wb[k2 + g] >> sh) & 0x0F0F0F0Fu;
      a[3] = (wb[k2 + g + 8] >> sh) & 0x0F0F0F0Fu;
      if constexpr (L != kQ4)
        for (uint32_t& v : a) v = grid_values<L>(v);
    } else {
      // Signed q from q + 128.
      constexpr int v = kValuesAt<L>;
      a[0] = wb[v + 16 * t + g] ^ 0x80808080u;
      a[1] = wb[v + 16 * t + g + 8] ^ 0x80808080u;
      a[2] = wb[v + 16 * (4 + t) + g] ^ 0x80808080u;
      a[3] = wb[v + 16 * (4 + t) + g + 8] ^ 0x80808080u;
    }
    uint32_t b0, b1;
    tile.activations(b, b0, b1);
    if constexpr (kHalves<L>) {
      // Each half of 16 values its own mma (the other half's registers
      // zero) and scale: word 16h + r; then the minimums, word 32 + 16h + r.
      int c0[4], c1[4];
      mma_s8(c0, a[0], a[1], 0u, 0u, b0, b1);
      mma_s8(c1, 0u, 0u, a[2], a[3], b0, b1);
      tile.add_dots(c0, __uint_as_float(wb[g]), __uint_as_float(wb[g + 8]), b);
      tile.add_dots(c1, __uint_as_float(wb[16 + g]), __uint_as_float(wb[16 + g + 8]), b);
      if constexpr (L == kQ8HalfMin)
        for (int h = 0; h < 2; ++h)
          tile.add_half_mins(__uint_as_float(wb[32 + 16 * h + g]), __uint_as_float(wb[32 + 16 * h + g + 8]), b, h);
      continue;
    }
    int c[4];
    mma_s8(c, a[0], a[1], a[2], a[3], b0, b1);
    if constexpr (L == kMx) {
      // The rows' E8M0 exponents, row r at byte r of words 0..3.
      const uint8_t* e = reinterpret_cast<const uint8_t*>(wb);
      tile.add_dots(c, mx_scale(e[g]), mx_scale(e[g + 8]), b);
      continue;
    }
    tile.add_dots(c, __uint_as_float(wb[g]), __uint_as_float(wb[g + 8]), b);
    // The minimums: word 16 + r.
    if constexpr (L == kQ4 || L == kQ8Min)
      tile.add_mins(__uint_as_float(wb[16 + g]), __uint_as_float(wb[16 + g + 8]), b, L == kQ4);
  }
  tile.store(y, rows);
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

// Row r's four values of nibble vector k (low nibbles when hi == 0, high
// when 1), with their plane bits, less the offset, as 4 bytes.
template <int L>
__device__ __forceinline__ uint32_t k_values(const uint32_t* w, int r, int k, int hi) {
  uint32_t q = (w[8 + 16 * k + r] >> (4 * hi)) & 0x0F0F0F0Fu;
  if constexpr (L == kQ5K) q |= ((w[72 + r] >> (2 * k + hi)) & 0x01010101u) << 4;
  if constexpr (L == kQ6K) {
    q |= ((w[72 + 16 * (k / 2) + r] >> (4 * (k % 2) + 2 * hi)) & 0x03030303u) << 4;
    q = __vsub4(q, 0x20202020u);
  }
  return q;
}

// As matmul_kernel, on a K layout: per block, the dots (per half for Q6_K),
// then kx16's float steps: scale = d * sc, acc = fma(dot, scale * dx, acc)
// half by half, then fma(-dmin * mn, d * sum, acc).
template <int L>
__global__ void __launch_bounds__(128) kmatmul_kernel(const uint32_t* __restrict__ words, int64_t rows, int64_t nb,
                                                      const Q8* __restrict__ acts, int n_tok, float* __restrict__ y) {
  using S = KShape<L>;
  WarpTile tile(acts, nb, n_tok);
  if (tile.idle()) return;
  const int g = tile.g, t = tile.t;
  const uint32_t* gw = words + int64_t(blockIdx.x) * (nb / 8) * S::kSuper;
  for (int64_t b = 0; b < nb; ++b) {
    const uint32_t* sup = gw + (b / 8) * S::kSuper;
    const uint32_t* wb = sup + S::kHeader + (b % 8) * S::kBlock;
    const int k0 = t >> 1, hi = t & 1;
    const uint32_t x0 = k_values<L>(wb, g, k0, hi), x1 = k_values<L>(wb, g + 8, k0, hi);
    const uint32_t x2 = k_values<L>(wb, g, 2 + k0, hi), x3 = k_values<L>(wb, g + 8, 2 + k0, hi);
    uint32_t b0, b1;
    tile.activations(b, b0, b1);
    int c[2][4];
    if constexpr (S::kHalves) {
      mma_s8(c[0], x0, x1, 0u, 0u, b0, b1);
      mma_s8(c[1], 0u, 0u, x2, x3, b0, b1);
    } else {
      mma_s8(c[0], x0, x1, x2, x3, b0, b1);
    }
    const auto* f = reinterpret_cast<const signed char*>(wb);
    const float d0 = __uint_as_float(sup[g]), d1 = __uint_as_float(sup[g + 8]);
    for (int h = 0; h < (S::kHalves ? 2 : 1); ++h)
      tile.add_dots(c[h], __fmul_rn(d0, float(f[16 * h + g])), __fmul_rn(d1, float(f[16 * h + g + 8])), b);
    if constexpr (S::kMins)
      tile.add_mins(__fmul_rn(__uint_as_float(sup[16 + g]), float(f[16 + g])),
                    __fmul_rn(__uint_as_float(sup[16 + g + 8]), float(f[16 + g + 8])), b, false);
  }
  tile.store(y, rows);
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

void matmul(int layout, const uint32_t* words, int64_t rows, int64_t nb, const void* acts, int n_tok, float* y) {
  if (rows <= 0 || n_tok <= 0) return;
  const int tiles = (n_tok + 7) / 8, warps = std::min(4, tiles);
  const dim3 grid(unsigned((rows + 15) / 16), unsigned((tiles + warps - 1) / warps));
  const auto* a = static_cast<const Q8*>(acts);
  auto* kernel = layout == kQ4          ? matmul_kernel<kQ4>
                 : layout == kQ8        ? matmul_kernel<kQ8>
                 : layout == kQ8Min     ? matmul_kernel<kQ8Min>
                 : layout == kQ8Half    ? matmul_kernel<kQ8Half>
                 : layout == kQ8HalfMin ? matmul_kernel<kQ8HalfMin>
                 : layout == kMx        ? matmul_kernel<kMx>
                 : layout == kIq4       ? matmul_kernel<kIq4>
                 : layout == kQ4K       ? kmatmul_kernel<kQ4K>
                 : layout == kQ5K       ? kmatmul_kernel<kQ5K>
                                        : kmatmul_kernel<kQ6K>;
  launch("the quantized matmul", kernel, grid, 32 * warps, words, rows, nb, a, n_tok, y);
}

}  // namespace cs::cuda::kernels
