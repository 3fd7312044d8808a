#include "attn/dense.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attn/block.h"
#include "attn/state.h"
#include "base/f16.h"
#include "kv/chunk_pool.h"

namespace cs {
namespace {

constexpr int kSlice = 64;  // rows per block-kernel call (its stack buffers)

void attend_slice(const float* q, float* out, const size_t* off, const int* first, const int* visible, int nq,
                  const DenseBlocks& kv, const float* sink, float softcap) {
  const int d = kv.d;
  alignas(64) float o[kSlice * 256];
  float m[kSlice], l[kSlice];
  int seen = 0;
  for (int r = 0; r < nq; ++r) seen = std::max(seen, visible[r]);
  attend_rows_part(q, off, first, visible, nq, kv, 0, (seen + kDenseBlock - 1) / kDenseBlock, o, m, l, softcap);
  for (int r = 0; r < nq; ++r) finalize(o + r * d, m[r], l[r], d, out + off[r], sink ? sink[r] : -INFINITY);
}

// Any head dim: scores, a numerically safe softmax (a sink's logit in its
// denominator), then the weighted V sum.
void attend_row_plain(const float* q, float* out, int lo, int n, const DenseBlocks& kv, float sink, float softcap) {
  thread_local std::vector<float> score;
  score.resize(size_t(n));
  const int d = kv.d;
  const float scale = 1.0f / std::sqrt(float(d));
  const size_t es = kv_type_size(KvType(kv.type));
  float m = -INFINITY;
  for (int t = lo; t < n; ++t) {
    const uint8_t* kt = kv.kt + size_t(t / kDenseBlock) * kv.stride + size_t(t % kDenseBlock) * es;
    float s = 0;
    for (int x = 0; x < d; ++x) s += q[x] * load_kv_elem(kt + size_t(x) * kDenseBlock * es, kv.type);
    score[size_t(t)] = softcap != 0.0f ? softcap_score(s * scale, softcap) : s * scale;
    m = std::max(m, score[size_t(t)]);
  }
  m = std::max(m, sink);
  float sum = sink == -INFINITY ? 0.0f : std::exp(sink - m);
  for (int t = lo; t < n; ++t) sum += (score[size_t(t)] = std::exp(score[size_t(t)] - m));
  std::fill(out, out + d, 0.0f);
  for (int t = lo; t < n; ++t) {
    const uint8_t* v = kv.v + size_t(t / kDenseBlock) * kv.stride + size_t(t % kDenseBlock) * d * es;
    const float p = score[size_t(t)] / sum;
    for (int x = 0; x < d; ++x) out[x] += p * load_kv_elem(v + size_t(x) * es, kv.type);
  }
}

}  // namespace

void attend_rows(const float* q, float* out, const size_t* off, const int* first, const int* visible, int nq,
                 const DenseBlocks& kv, const float* sink, float softcap) {
  if (block_head_dim(kv.d)) {
    for (int r0 = 0; r0 < nq; r0 += kSlice)
      attend_slice(q, out, off + r0, first ? first + r0 : nullptr, visible + r0, std::min(kSlice, nq - r0), kv,
                   sink ? sink + r0 : nullptr, softcap);
    return;
  }
  for (int r = 0; r < nq; ++r)
    attend_row_plain(q + off[r], out + off[r], first ? first[r] : 0, visible[r], kv, sink ? sink[r] : -INFINITY,
                     softcap);
}

// Blocks no row may see yet (causal prefill) are skipped.
void attend_rows_part(const float* q, const size_t* off, const int* first, const int* visible, int nq,
                      const DenseBlocks& kv, int b0, int b1, float* o, float* m, float* l, float softcap) {
  const int d = kv.d;
  alignas(64) float qs[kSlice * 256];
  // Queries pre-scaled once here, not once per block by the kernel.
  const float scale = 1.0f / std::sqrt(float(d));
  for (int r = 0; r < nq; ++r) {
    for (int x = 0; x < d; ++x) qs[r * d + x] = q[off[r] + size_t(x)] * scale;
    std::fill(o + r * d, o + (r + 1) * d, 0.0f);
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  int limit[kSlice], lo[kSlice];
  BlockJob j;
  j.q = qs;
  j.q_stride = d;
  j.nq = nq;
  j.kv_type = kv.type;
  j.c = kDenseBlock;
  j.d = d;
  j.limit = limit;
  j.first = lo;
  j.o = o;
  j.o_stride = d;
  j.m = m;
  j.l = l;
  j.softcap = softcap;
  for (int b = b0; b < b1; ++b) {
    bool any = false;
    for (int r = 0; r < nq; ++r) {
      limit[r] = std::clamp(visible[r] - b * kDenseBlock, 0, kDenseBlock);
      lo[r] = first ? std::clamp(first[r] - b * kDenseBlock, 0, kDenseBlock) : 0;
      if (lo[r] >= limit[r]) limit[r] = lo[r] = 0;  // a block before the row's window
      any = any || limit[r] > 0;
    }
    if (!any) continue;
    j.kt = kv.kt + size_t(b) * kv.stride;
    j.v = kv.v + size_t(b) * kv.stride;
    const bool last = b + 1 == b1;
    j.next_kt = last ? nullptr : kv.kt + size_t(b + 1) * kv.stride;
    j.next_v = last ? nullptr : kv.v + size_t(b + 1) * kv.stride;
    block_update(j);
  }
}

}  // namespace cs
