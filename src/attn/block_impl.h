// Vector implementation of block_update, included by block_avx2.cpp and
// block_avx512.cpp, each supplying `Ops` (vector width, loads with fp16/bf16
// widening, exp) and compiled with its own target flags. Everything lives in
// an anonymous namespace and uses no inline library code, so nothing built for
// AVX-512 leaks into code that runs elsewhere.
//
// Per chunk: S = (q . K^T) * scale for rows in register blocks, masked to each
// row's visible keys; online softmax update of (o, m, l); o += P . V.
#include <immintrin.h>

#include <type_traits>
#include <utility>

#include "attn/block.h"

namespace {

constexpr float kNegInf = -__builtin_inff();
// Score of a key a row may not see. Finite, so exp_nonpos needs neither a
// clamp nor a mask: exp(kMasked - m) is exactly 0 for any real row max m.
constexpr float kMasked = -1e30f;

// Storage element types, distinct so loads can widen them.
struct Half {
  unsigned short bits;
};
struct BHalf {
  unsigned short bits;
};

// rank1_rows steps per call of Prefetch::step(). A block of 4 or more rows
// asks the pacer once per Ops::kPrefetchGroup steps: its counter and branch
// in every step cost a measurable share of a cached chunk's time (AVX2 asks
// every 8 steps). Blocks of 1-3 rows do less work per step and need a line
// or two every step, which one call per 8 steps would issue in bursts the
// core drops, so they ask every step (figures: docs/kernels.md).
template <class Ops>
constexpr int prefetch_group(int rows) { return rows >= 4 ? Ops::kPrefetchGroup : 1; }

// Cache lines of the next chunk still to be prefetched. The kernels call
// step() once per inner-loop iteration and a request goes out every `every`
// steps, so they spread evenly over the compute instead of queueing for the
// few line-fill buffers at once (the hardware prefetcher stops at every 4 KB
// page, so a 16 KB block needs this help).
struct Prefetch {
  const char* p = nullptr;
  int lines = 0, per = 1, every = 1, tick = 0;
  Prefetch() = default;
  // `iters`: the inner-loop steps that will call step().
  Prefetch(const uint8_t* block, int bytes, int iters)
      : p(reinterpret_cast<const char*>(block)), lines(block ? bytes / 64 : 0) {
    if (lines == 0 || iters <= 0) return;
    every = iters > lines ? iters / lines : 1;
    per = (lines + iters - 1) / iters;
  }
  void step() {
    if (lines <= 0 || ++tick < every) return;
    tick = 0;
    for (int i = 0; i < per; ++i) _mm_prefetch(p + i * 64, _MM_HINT_T1);
    p += per * 64;
    lines -= per;
  }
};

// The micro-kernel both GEMMs of a chunk are made of: for R rows (a
// compile-time count, so the accumulators stay in registers and the loops
// unroll), C[r][0, N*W) = (load_c ? C[r] : 0) + sum_s A[r][s] * B[s][0, N*W):
// per step, N loads of B and R broadcasts of A feed R*N FMAs. Scores are
// A = q, B = a tile of K^T (steps over d); P.V is A = P, B = V (steps over
// keys). kStore: also write the (widened) B tile to `wide`, so the first row
// block widens fp16/bf16 K/V for the others while it computes. Each C element
// sums its steps in order, so a row's bits do not depend on R or on how the
// caller slices the steps (fp32 stores and loads of C in between are exact).
template <class Ops, class E, int N, int R, bool kStore = false>
__attribute__((always_inline)) inline void rank1_rows(const float* __restrict A, int lda, const E* __restrict B, int ldb, int steps, float* __restrict C,
                int ldc, bool load_c, Prefetch& pf, float* __restrict wide = nullptr, int ldw = 0) {
  using V = typename Ops::V;
  constexpr int W = Ops::kWidth;
  Prefetch f = pf;
  V acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) acc[r][i] = load_c ? Ops::load(C + r * ldc + i * W) : Ops::zero();
  const E* bp = B;
  auto step = [&](int s) __attribute__((always_inline)) {
    V b[N];
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) b[i] = Ops::load(bp + i * W);
    if constexpr (kStore) {
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) Ops::store(wide + s * ldw + i * W, b[i]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V a = Ops::set1(A[r * lda + s]);
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) acc[r][i] = Ops::fma(a, b[i], acc[r][i]);
    }
    bp += ldb;
  };
  constexpr int G = prefetch_group<Ops>(R);
  int s = 0;
  for (; s + G <= steps; s += G) {
    f.step();
#pragma GCC unroll 8
    for (int u = 0; u < G; ++u) step(s + u);
  }
  for (; s < steps; ++s) step(s);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) Ops::store(C + r * ldc + i * W, acc[r][i]);
  pf = f;
}

// Calls f(std::integral_constant<int, nr>) for 1 <= nr <= N, so a row
// count known only at run time selects a kernel compiled for it.
template <int N, class F>
void with_rows(int nr, F&& f) {
  if constexpr (N > 1) {
    if (nr != N) return with_rows<N - 1>(nr, f);
  }
  f(std::integral_constant<int, N>{});
}

// Splits nq rows into ceil(nq / K) register blocks of nearly equal size,
// largest first, and calls f(r0, nr) for each. A remainder block of one or
// two rows would have too few independent accumulators to cover the FMA
// latency and ran at half speed (32 rows: 6+6+5+5+5+5, not 6*5+2).
template <int K>
constexpr int row_blocks(int nq) { return (nq + K - 1) / K; }

template <int K, class F>
void for_row_blocks(int nq, F&& f) {
  if (nq <= 0) return;
  const int blocks = row_blocks<K>(nq), base = nq / blocks, extra = nq % blocks;
  for (int b = 0, r0 = 0; b < blocks; r0 += base + (b < extra), ++b) f(r0, base + (b < extra));
}

// Register tiling of the two GEMMs: score blocks of kRows rows x kTile
// vectors of keys, P.V blocks of kPvRows rows x kPvCols output columns. Each
// ISA's Ops names two: `Many` for batched rows and `Few` for jobs of at most
// Ops::kFewRows rows, where a tall block would leave too few independent
// accumulators to cover the FMA latency (one decode row of one sequence).
template <int Rows, int Tile, int PvRows, int PvCols>
struct Shape {
  static constexpr int kRows = Rows, kTile = Tile, kPvRows = PvRows, kPvCols = PvCols;
};

// Online softmax for all rows, Ops::kWidth rows at a time: turns S into
// weights exp(s - m_new) (0 where masked), folds their sums into l, moves m,
// and rescales o where m moved. Row maxima and sums of a group come out of
// one transpose-reduction, not two horizontal reductions per row; the order
// of every row's sum is fixed by its lane, whatever the other rows are, so a
// row gets the same bits in a batch of 1 or of 96.
template <class Ops, int D>
void softmax_rows(const cs::BlockJob& j, float* S, int cols) {
  using V = typename Ops::V;
  constexpr int W = Ops::kWidth;
  auto vmax = [](V a, V b) { return Ops::max(a, b); };
  auto vadd = [](V a, V b) { return Ops::add(a, b); };
  for (int g = 0; g < j.nq; g += W) {
    const int n = j.nq - g < W ? j.nq - g : W;
    V rv[W];
    for (int k = 0; k < W; ++k) {
      const int i = Ops::kRowOrder[k];
      rv[k] = Ops::set1(kNegInf);
      // A row that sees no key of this chunk keeps its max (and gets P = 0).
      if (i >= n || j.limit[g + i] == 0) continue;
      float* s = S + (g + i) * cols;
      // Capped before masking: a masked key stays kMasked, not -cap.
      if (j.softcap != 0.0f) {
        const V cap = Ops::set1(j.softcap), inv = Ops::set1(1.0f / j.softcap);
        for (int t = 0; t < cols; t += W) Ops::store(s + t, softcap_vec<Ops>(Ops::load(s + t), cap, inv));
      }
      for (int t = j.limit[g + i]; t < cols; ++t) s[t] = kMasked;
      if (j.first)
        for (int t = 0; t < j.first[g + i]; ++t) s[t] = kMasked;
      for (int t = 0; t < cols; t += W) rv[k] = Ops::max(rv[k], Ops::load(s + t));
    }
    alignas(64) float m_old[W], m_new[W], alpha[W], sum[W];
    for (int i = 0; i < W; ++i) m_old[i] = i < n ? j.m[g + i] : kNegInf;
    const V mo = Ops::load(m_old);
    const V mn = Ops::max(Ops::reduce_rows(rv, vmax), mo);
    Ops::store(m_new, mn);
    // alpha = exp(m_old - m_new): exactly 1 when the max did not move, 0 for
    // an empty state.
    Ops::store(alpha, Ops::zero_where_neginf(exp_nonpos<V, Ops>(Ops::sub(mo, mn)), mo));
    for (int k = 0; k < W; ++k) {
      const int i = Ops::kRowOrder[k];
      rv[k] = Ops::zero();
      if (i >= n) continue;
      float* s = S + (g + i) * cols;
      if (j.limit[g + i] == 0) {
        for (int t = 0; t < cols; t += W) Ops::store(s + t, Ops::zero());
        continue;
      }
      const V vm = Ops::set1(m_new[i]);
      for (int t = 0; t < cols; t += W) {
        const V p = exp_nonpos<V, Ops>(Ops::sub(Ops::load(s + t), vm));
        Ops::store(s + t, p);
        rv[k] = Ops::add(rv[k], p);
      }
    }
    Ops::store(sum, Ops::reduce_rows(rv, vadd));
    for (int i = 0; i < n; ++i) {
      j.l[g + i] = j.l[g + i] * alpha[i] + sum[i];
      j.m[g + i] = m_new[i];
      if (alpha[i] != 1.0f) {
        float* o = j.o + (g + i) * j.o_stride;
        for (int x = 0; x < D; ++x) o[x] *= alpha[i];
      }
    }
  }
}

// The widest slice of V's D columns, at most PvCols and a whole number of
// vectors of W, that divides D.
template <int D, int PvCols, int W>
constexpr int pv_slice() {
  int dh = D < PvCols ? D : PvCols;
  while (D % dh || dh % W) dh -= W;
  return dh;
}

// One chunk for nq rows. kWiden (fp16/bf16 storage, many rows): each 64-row
// slice of K^T, then each 64-column slice of V, is widened to fp32 once, by
// the first row block while it computes, into one buffer the other row
// blocks read, so the working set stays near L1 size.
template <class Ops, class Sh, class E, int D, bool kWiden>
void block_impl(const cs::BlockJob& job) {
  constexpr int W = Ops::kWidth;
  constexpr int kMaxRows = 64;
  constexpr int kMaxC = 256;
  alignas(64) float qcopy[kMaxRows * D];
  alignas(64) float S[kMaxRows * kMaxC];
  alignas(64) float wide[kWiden ? 64 * kMaxC : 16];
  cs::BlockJob j = job;
  int len = 0;
  for (int r = 0; r < j.nq; ++r) len = j.limit[r] > len ? j.limit[r] : len;
  if (len == 0) return;
  const int cols = (len + Sh::kTile * W - 1) / (Sh::kTile * W) * (Sh::kTile * W);
  // Callers that pre-scale their queries into contiguous rows skip this copy.
  const float* qs = j.q;
  if (j.scale != 1.0f || j.q_stride != D) {
    for (int r = 0; r < j.nq; ++r)
      for (int k = 0; k < D; ++k) qcopy[r * D + k] = j.q[r * j.q_stride + k] * j.scale;
    qs = qcopy;
  }
  const int block_bytes = D * j.c * int(sizeof(E));
  // Slices of K^T (KD of its d rows) and of V (DH columns) divide d: 64 and
  // the tile's width for 64, 128 and 256; Phi-3's 96 takes 48 and 48 (or 32).
  constexpr int KD = kWiden && D > 64 ? (D % 64 ? D / 2 : 64) : D;
  constexpr int DH = pv_slice<D, Sh::kPvCols, W>();
  // Each row block asks the pacer once per d (scores) or key (P.V) of every
  // tile, or once per group of them (prefetch_group); the requests are spread
  // over the first 1 / Ops::kPrefetchFront of those calls.
  // Jobs of fewer than Ops::kPrefetchMinRows rows are the most memory-bound
  // (one FLOP per byte of K/V per row) and leave the next chunk to the
  // hardware prefetcher, which streams it faster than these requests do.
  constexpr int F = Ops::kPrefetchFront;
  const bool pf = j.nq >= Ops::kPrefetchMinRows;
  int k_calls = 0, v_calls = 0;
  for_row_blocks<Sh::kRows>(j.nq, [&](int, int nr) { k_calls += D / prefetch_group<Ops>(nr) * (cols / (Sh::kTile * W)); });
  for_row_blocks<Sh::kPvRows>(j.nq, [&](int, int nr) { v_calls += D / DH * (len / prefetch_group<Ops>(nr)); });
  Prefetch pf_k(pf ? j.next_kt : nullptr, block_bytes, k_calls / F);
  Prefetch pf_v(pf ? j.next_v : nullptr, block_bytes, v_calls / F);
  // S = q . K^T in 64-row slices of K^T. With fp16/bf16 storage the first row
  // block reads the slice and widens it into `wide` as it goes (16 KB, so it,
  // q and S fit L1 together); the other row blocks read the fp32 copy.
  constexpr int T = Sh::kTile, NV = DH / W;
  for (int k0 = 0; k0 < D; k0 += KD) {
    const E* src = reinterpret_cast<const E*>(j.kt) + k0 * j.c;
    for_row_blocks<Sh::kRows>(j.nq, [&](int r0, int nr) {
      with_rows<Sh::kRows>(nr, [&](auto R) {
        constexpr int RR = decltype(R)::value;
        const float* q = qs + r0 * D + k0;
        for (int col = 0; col < cols; col += T * W) {
          float* s = S + r0 * cols + col;
          if constexpr (!kWiden) rank1_rows<Ops, E, T, RR>(q, D, src + col, j.c, KD, s, cols, k0 > 0, pf_k);
          else if (r0 == 0)
            rank1_rows<Ops, E, T, RR, true>(q, D, src + col, j.c, KD, s, cols, k0 > 0, pf_k, wide + col, cols);
          else rank1_rows<Ops, float, T, RR>(q, D, wide + col, cols, KD, s, cols, k0 > 0, pf_k);
        }
      });
    });
  }
  softmax_rows<Ops, D>(j, S, cols);
  // P.V in DH-column slices of V. With the shared fp32 copy, slice by slice
  // (the first row block widens each); without it, each row block sweeps all
  // slices in one compiled-for-its-height loop, so the dispatch on the row
  // count is paid once per row block, not once per slice.
  if constexpr (kWiden) {
    for (int c0 = 0; c0 < D; c0 += DH) {
      const E* src = reinterpret_cast<const E*>(j.v) + c0;
      for_row_blocks<Sh::kPvRows>(j.nq, [&](int r0, int nr) {
        with_rows<Sh::kPvRows>(nr, [&](auto R) {
          constexpr int RR = decltype(R)::value;
          const float* p = S + r0 * cols;
          float* o = j.o + r0 * j.o_stride + c0;
          if (r0 == 0) rank1_rows<Ops, E, NV, RR, true>(p, cols, src, D, len, o, j.o_stride, true, pf_v, wide, DH);
          else rank1_rows<Ops, float, NV, RR>(p, cols, wide, DH, len, o, j.o_stride, true, pf_v);
        });
      });
    }
  } else {
    const E* v = reinterpret_cast<const E*>(j.v);
    for_row_blocks<Sh::kPvRows>(j.nq, [&](int r0, int nr) {
      with_rows<Sh::kPvRows>(nr, [&](auto R) {
        constexpr int RR = decltype(R)::value;
        for (int c0 = 0; c0 < D; c0 += DH)
          rank1_rows<Ops, E, NV, RR>(S + r0 * cols, cols, v + c0, D, len, j.o + r0 * j.o_stride + c0, j.o_stride, true, pf_v);
      });
    });
  }
}

template <class Ops, class E, int D>
void dispatch_rows(const cs::BlockJob& j) {
  if (j.nq <= Ops::kFewRows) {
    if (j.nq == 1) return block_impl<Ops, typename Ops::One, E, D, false>(j);
    return block_impl<Ops, typename Ops::Two, E, D, false>(j);
  }
  if (j.nq >= Ops::kWidenRows && sizeof(E) == 2) return block_impl<Ops, typename Ops::Many, E, D, true>(j);
  block_impl<Ops, typename Ops::Many, E, D, false>(j);
}

template <class Ops, int D>
void dispatch_type(const cs::BlockJob& j) {
  switch (j.kv_type) {
    case 0: return dispatch_rows<Ops, float, D>(j);
    case 1: return dispatch_rows<Ops, Half, D>(j);
    default: return dispatch_rows<Ops, BHalf, D>(j);
  }
}

template <class Ops>
void block_entry(const cs::BlockJob& j) {
  // Rows beyond the stack buffers are handled in slices.
  for (int r0 = 0; r0 < j.nq; r0 += 64) {
    cs::BlockJob s = j;
    s.nq = j.nq - r0 < 64 ? j.nq - r0 : 64;
    s.q = j.q + r0 * j.q_stride;
    s.o = j.o + r0 * j.o_stride;
    s.m = j.m + r0;
    s.l = j.l + r0;
    s.limit = j.limit + r0;
    s.first = j.first ? j.first + r0 : nullptr;
    if (j.d == 256) dispatch_type<Ops, 256>(s);
    else if (j.d == 128) dispatch_type<Ops, 128>(s);
    else if (j.d == 96) dispatch_type<Ops, 96>(s);
    else dispatch_type<Ops, 64>(s);
  }
}

}  // namespace
