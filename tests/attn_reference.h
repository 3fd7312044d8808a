// The attention tests' reference: plain double-precision softmax over each
// row's keys, read from the tree's host memory token by token (by its own
// positions, not the plan's).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/attention.h"
#include "kv/host_tree.h"

namespace cs {

inline void attn_reference(const HostTree& tree, const AttnProblem& p) {
  const KvLayout& L = tree.layout();
  const int n_heads = p.plan->n_heads, d = L.head_dim, group = n_heads / L.n_kv_heads;
  std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
  for (int i = 0; i < p.n_seqs(); ++i) {
    const SeqId id = p.plan->seqs[size_t(i)];
    const int len = tree.length(id), nr = p.rows_of(i);
    for (int r = 0; r < nr; ++r)
      for (int h = 0; h < n_heads; ++h) {
        const size_t row = (size_t(p.rows_begin(i) + r) * n_heads + h) * d;
        const float* q = p.q + row;
        const int vis = len - nr + r + 1;
        const int lo = p.window_first ? std::max(0, p.window_first[p.rows_begin(i) + r]) : 0;
        std::vector<double> s(static_cast<size_t>(vis)), acc(static_cast<size_t>(d), 0.0);
        // A sink (gpt-oss) is one more logit in the softmax, with no value.
        const double sink = p.sinks ? double(p.sinks[h]) : -INFINITY;
        double mx = sink;
        for (int t = lo; t < vis; ++t) {
          tree.read_kv(id, t, p.layer, h / group, k.data(), v.data());
          double dot = 0;
          for (int x = 0; x < d; ++x) dot += double(q[x]) * k[size_t(x)];
          s[size_t(t)] = dot / std::sqrt(double(d));
          if (p.softcap != 0) s[size_t(t)] = p.softcap * std::tanh(s[size_t(t)] / p.softcap);  // Gemma 2
          mx = std::max(mx, s[size_t(t)]);
        }
        double z = sink == -INFINITY ? 0.0 : std::exp(sink - mx);
        for (int t = lo; t < vis; ++t) {
          const double w = std::exp(s[size_t(t)] - mx);
          z += w;
          tree.read_kv(id, t, p.layer, h / group, k.data(), v.data());
          for (int x = 0; x < d; ++x) acc[size_t(x)] += w * v[size_t(x)];
        }
        for (int x = 0; x < d; ++x) p.out[row + size_t(x)] = z > 0 ? float(acc[size_t(x)] / z) : 0.0f;
      }
  }
}

}  // namespace cs
