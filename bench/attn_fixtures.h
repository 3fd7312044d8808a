// Set-ups the attention benchmarks share (kv_bench, kernel_ab): the block
// kernel's job on one cache-resident chunk, and ChunkAttention Table 3's
// all-shared cell. Values come from fixed integer hashes, so every run and
// every program sees the same data.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "attn/attention.h"
#include "kv/host_tree.h"
#include "attn/block.h"
#include "base/f16.h"
#include "kv/host_tree.h"

namespace cs::bench {

// A value in [-1000, 1000] / div from index i and an odd multiplier.
inline float noise(size_t i, uint32_t mul, float div) { return float(int(uint32_t(i) * mul % 2001) - 1000) / div; }

// One chunk (c = 64, d = 128) of fp16 or fp32 K/V (the same values either
// way) and nq query rows that see all of it. Holds the buffers `job` points
// into, so it is neither copied nor moved.
struct BlockFixture {
  static constexpr int kC = 64, kD = 128;
  std::vector<uint16_t> kt16, v16;
  std::vector<float> kt32, v32, q, o, m, l;
  std::vector<int> limit;
  BlockJob job;

  BlockFixture(int nq, KvType type)
      : kt16(size_t(kC) * kD), v16(kt16.size()), kt32(kt16.size()), v32(kt16.size()),
        q(size_t(nq) * kD, 0.01f), o(q.size(), 0.0f), m(size_t(nq), -INFINITY), l(size_t(nq), 0.0f),
        limit(size_t(nq), kC) {
    for (size_t i = 0; i < kt16.size(); ++i) {
      kt16[i] = f32_to_f16(noise(i, 2654435761u, 500));
      v16[i] = f32_to_f16(noise(i, 40503u, 1000));
      kt32[i] = f16_to_f32(kt16[i]);
      v32[i] = f16_to_f32(v16[i]);
    }
    const bool half = type == KvType::kF16;
    job.q = q.data();
    job.q_stride = kD;
    job.nq = nq;
    job.kt = half ? reinterpret_cast<const uint8_t*>(kt16.data()) : reinterpret_cast<const uint8_t*>(kt32.data());
    job.v = half ? reinterpret_cast<const uint8_t*>(v16.data()) : reinterpret_cast<const uint8_t*>(v32.data());
    job.kv_type = int(type);
    job.c = kC;
    job.d = kD;
    job.limit = limit.data();
    job.o = o.data();
    job.o_stride = kD;
    job.m = m.data();
    job.l = l.data();
  }
  BlockFixture(const BlockFixture&) = delete;
  BlockFixture& operator=(const BlockFixture&) = delete;
  double flops() const { return 4.0 * job.nq * kC * kD; }
};

// Table 3's all-shared cell: b sequences holding one n-token prompt (h heads,
// d = 128, c = 64, fp16), so every chunk is shared by all of them; with
// `own` > 0 each sequence then has `own` tokens of its own (a decode batch
// after a shared prompt: phase two walks those chunks). `group` query heads
// per KV head and head size `d` give other models' shapes (SmolLM2: h = 3,
// group 3, d 64). K/V noise that differs from chunk to chunk (so the running
// max moves) and b x h x group queries, one decode row per sequence.
struct SharedCell {
  int b, h, n, own, group, d;
  std::unique_ptr<HostTree> tree;
  AttnPlan plan;
  AttnWorkspace ws;
  std::vector<float> q, out;

  SharedCell(int b_, int h_, int n_, int own_ = 0, int group_ = 1, int d_ = 128)
      : b(b_), h(h_), n(n_), own(own_), group(group_), d(d_) {
    const KvLayout L{1, h, d, 64, KvType::kF16};
    tree = std::make_unique<HostTree>(L, L.chunk_bytes() * size_t(n / 64 + b * (own / 64 + 1) + 40));
    for (int s = 0; s < b; ++s) {
      std::vector<int32_t> prompt(static_cast<size_t>(n + own));
      for (int i = 0; i < n + own; ++i) prompt[size_t(i)] = i < n ? i : 1000000 * (s + 1) + i;
      int matched = 0;
      if (!tree->join(s, prompt, &matched).ok() ||
          !tree->append(s, std::span<const int32_t>(prompt).subspan(size_t(matched))).ok())
        std::abort();
    }
    plan = plan_attention(tree->plan_input(), {}, h * group);
    std::vector<uint16_t> kv(L.chunk_bytes() / 2);
    std::vector<char> done(size_t(tree->pool().capacity()), 0);
    size_t chunk = 0;
    for (ChunkId c : plan.chunk) {
      if (done[size_t(c)]) continue;
      done[size_t(c)] = 1;
      for (size_t i = 0; i < kv.size(); ++i) kv[i] = f32_to_f16(noise(i + 7919 * chunk, 2654435761u, 500));
      std::memcpy(tree->pool().data(c), kv.data(), L.chunk_bytes());
      ++chunk;
    }
    q.resize(size_t(b) * h * group * d);
    for (size_t i = 0; i < q.size(); ++i) q[i] = noise(i, 40503u, 1000);
    out.resize(q.size());
  }
  AttnProblem problem() { return {&tree->pool(), &plan, 0, q.data(), out.data(), &ws}; }
  double flops() const { return 4.0 * b * h * group * (n + own) * d; }
};

}  // namespace cs::bench
