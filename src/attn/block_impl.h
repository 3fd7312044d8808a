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

#include "attn/block.h"

namespace {

constexpr float kNegInf = -__builtin_inff();

// Storage element types, distinct so loads can widen them.
struct Half {
  unsigned short bits;
};
struct BHalf {
  unsigned short bits;
};

// Scores of up to Ops::kRows rows against one 4-vector column tile of K^T.
template <class Ops, class E, int D>
void scores_tile(const cs::BlockJob& j, const float* qs, int r0, int nr, int col, float* S, int ldS) {
  using V = typename Ops::V;
  constexpr int R = Ops::kRows;
  constexpr int W = Ops::kWidth;
  V acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < 4; ++t) acc[r][t] = Ops::zero();
  const E* kt = reinterpret_cast<const E*>(j.kt) + col;
  for (int k = 0; k < D; ++k) {
    const E* row = kt + k * j.c;
    V kv[4];
    for (int t = 0; t < 4; ++t) kv[t] = Ops::load(row + t * W);
    if (nr == R) {  // full register block: no per-row test in the hot loop
      for (int r = 0; r < R; ++r) {
        const V qb = Ops::set1(qs[(r0 + r) * D + k]);
        for (int t = 0; t < 4; ++t) acc[r][t] = Ops::fma(qb, kv[t], acc[r][t]);
      }
    } else {
      for (int r = 0; r < nr; ++r) {
        const V qb = Ops::set1(qs[(r0 + r) * D + k]);
        for (int t = 0; t < 4; ++t) acc[r][t] = Ops::fma(qb, kv[t], acc[r][t]);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int t = 0; t < 4; ++t) Ops::store(S + (r0 + r) * ldS + col + t * W, acc[r][t]);
}

// o[r] += sum_t P[r][t] V[t] for up to Ops::kPvRows rows, 64 output columns
// at a time: per key, kPvRows broadcasts and 64/W loads feed kPvRows * 64/W
// FMAs from registers.
template <class Ops, class E, int D>
void pv_rows(const cs::BlockJob& j, const float* P, int ldP, int r0, int nr, int len) {
  using V = typename Ops::V;
  constexpr int R = Ops::kPvRows;
  constexpr int W = Ops::kWidth;
  constexpr int DH = D < 64 ? D : 64;
  constexpr int NV = DH / W;
  const E* vb = reinterpret_cast<const E*>(j.v);
  for (int c0 = 0; c0 < D; c0 += DH) {
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < NV; ++i)
        acc[r][i] = r < nr ? Ops::loadf(j.o + (r0 + r) * j.o_stride + c0 + i * W) : Ops::zero();
    for (int t = 0; t < len; ++t) {
      V v[NV];
      for (int i = 0; i < NV; ++i) v[i] = Ops::load(vb + t * D + c0 + i * W);
      for (int r = 0; r < R; ++r) {
        const V p = Ops::set1(r < nr ? P[(r0 + r) * ldP + t] : 0.0f);
        for (int i = 0; i < NV; ++i) acc[r][i] = Ops::fma(p, v[i], acc[r][i]);
      }
    }
    for (int r = 0; r < nr; ++r)
      for (int i = 0; i < NV; ++i) Ops::storef(j.o + (r0 + r) * j.o_stride + c0 + i * W, acc[r][i]);
  }
}

// One chunk for nq rows. kWiden (fp16/bf16 storage, many rows): K^T is
// widened to fp32 once for all row blocks, scored, and then V is widened into
// the same buffer for P.V, so the working set stays near L1 size.
template <class Ops, class E, int D, bool kWiden>
void block_impl(const cs::BlockJob& job) {
  constexpr int W = Ops::kWidth;
  constexpr int kMaxRows = 64;
  constexpr int kMaxC = 256;
  using EW = typename std::conditional<kWiden, float, E>::type;
  alignas(64) float qcopy[kMaxRows * D];
  alignas(64) float S[kMaxRows * kMaxC];
  alignas(64) float wide[kWiden ? D * kMaxC : 16];
  cs::BlockJob j = job;
  int len = 0;
  for (int r = 0; r < j.nq; ++r) len = j.limit[r] > len ? j.limit[r] : len;
  if (len == 0) return;
  const int cols = (len + 4 * W - 1) / (4 * W) * (4 * W);
  // Callers that pre-scale their queries into contiguous rows skip this copy.
  const float* qs = j.q;
  if (j.scale != 1.0f || j.q_stride != D) {
    for (int r = 0; r < j.nq; ++r)
      for (int k = 0; k < D; ++k) qcopy[r * D + k] = j.q[r * j.q_stride + k] * j.scale;
    qs = qcopy;
  }
  if constexpr (kWiden) {
    const E* skt = reinterpret_cast<const E*>(j.kt);
    for (int k = 0; k < D; ++k)
      for (int t = 0; t < cols; t += W) Ops::storef(wide + k * cols + t, Ops::load(skt + k * j.c + t));
    j.kt = reinterpret_cast<const uint8_t*>(wide);
    j.c = cols;
  }
  for (int r0 = 0; r0 < j.nq; r0 += Ops::kRows) {
    const int nr = j.nq - r0 < Ops::kRows ? j.nq - r0 : Ops::kRows;
    for (int col = 0; col < cols; col += 4 * W) scores_tile<Ops, EW, D>(j, qs, r0, nr, col, S, cols);
  }
  // Online softmax: rescale what is accumulated, turn scores into weights.
  for (int r = 0; r < j.nq; ++r) {
    float* s = S + r * cols;  // rows packed at the used width: S stays in L1
    const int lim = j.limit[r];
    for (int t = lim; t < cols; ++t) s[t] = kNegInf;
    if (lim == 0) {
      for (int t = 0; t < cols; ++t) s[t] = 0;
      continue;
    }
    const float m_blk = Ops::max_row(s, cols);
    const float m_old = j.m[r];
    const float m_new = m_blk > m_old ? m_blk : m_old;
    // The running max rarely moves after the first chunks: skip the exp then.
    const float alpha = m_old == kNegInf ? 0.0f : m_old == m_new ? 1.0f : Ops::exp1(m_old - m_new);
    const float sum = Ops::exp_row(s, cols, m_new);  // s[t] = exp(s[t] - m_new), masked -> 0
    j.l[r] = j.l[r] * alpha + sum;
    j.m[r] = m_new;
    if (alpha != 1.0f) {
      float* o = j.o + r * j.o_stride;
      for (int i = 0; i < D; ++i) o[i] *= alpha;
    }
  }
  if constexpr (kWiden) {
    const E* sv = reinterpret_cast<const E*>(j.v);
    for (int t = 0; t < len * D; t += W) Ops::storef(wide + t, Ops::load(sv + t));
    j.v = reinterpret_cast<const uint8_t*>(wide);
  }
  for (int r0 = 0; r0 < j.nq; r0 += Ops::kPvRows) {
    const int nr = j.nq - r0 < Ops::kPvRows ? j.nq - r0 : Ops::kPvRows;
    pv_rows<Ops, EW, D>(j, S, cols, r0, nr, len);
  }
}

template <class Ops, class E, int D>
void dispatch_rows(const cs::BlockJob& j) {
  if (j.nq > 4 && sizeof(E) == 2) return block_impl<Ops, E, D, true>(j);
  block_impl<Ops, E, D, false>(j);
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
    if (j.d == 128) dispatch_type<Ops, 128>(s);
    else dispatch_type<Ops, 64>(s);
  }
}

}  // namespace
