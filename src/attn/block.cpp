#include "attn/block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cpu.h"
#include "base/f16.h"

namespace cs {
namespace {

float elem(const uint8_t* base, int kv_type, size_t i) {
  if (kv_type == 0) {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + i * 2, 2);
  return kv_type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace

float softcap_score(float s, float softcap) { return softcap * std::tanh(s / softcap); }

// Plain loops: the portable fallback and the yardstick of the vector kernels.
void block_update_scalar(const BlockJob& j) {
  std::vector<float> s(size_t(j.c));
  for (int r = 0; r < j.nq; ++r) {
    const int lim = j.limit[r], first = j.first ? j.first[r] : 0;
    if (lim == 0) continue;
    const float* q = j.q + size_t(r) * j.q_stride;
    float mx = -INFINITY;
    for (int t = first; t < lim; ++t) {
      float dot = 0;
      for (int k = 0; k < j.d; ++k) dot += q[k] * elem(j.kt, j.kv_type, size_t(k) * j.c + t);
      s[size_t(t)] = j.softcap != 0.0f ? softcap_score(dot * j.scale, j.softcap) : dot * j.scale;
      mx = std::max(mx, s[size_t(t)]);
    }
    const float m_new = std::max(mx, j.m[r]);
    const float alpha = j.m[r] == -INFINITY ? 0.0f : std::exp(j.m[r] - m_new);
    float* o = j.o + size_t(r) * j.o_stride;
    float sum = 0;
    for (int i = 0; i < j.d; ++i) o[i] *= alpha;
    for (int t = first; t < lim; ++t) {
      const float p = std::exp(s[size_t(t)] - m_new);
      sum += p;
      for (int i = 0; i < j.d; ++i) o[i] += p * elem(j.v, j.kv_type, size_t(t) * j.d + i);
    }
    j.l[r] = j.l[r] * alpha + sum;
    j.m[r] = m_new;
  }
}

void block_update(const BlockJob& job) {
  switch (cpu_isa()) {
    case Isa::kAvx512: return block_update_avx512(job);
    case Isa::kAvx2: return block_update_avx2(job);
    default: return block_update_scalar(job);
  }
}

}  // namespace cs
