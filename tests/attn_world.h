// Attention test worlds shared by the CPU kernels' tests and the GPU's:
// random trees of sequences (families of shared prefixes, forks, private
// suffixes), their plans and problems, and how results are compared.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn_reference.h"

namespace cs::test {

struct Case {
  int batch, n_kv_heads, group, d;
  KvType type;
  uint32_t seed;
  bool prefill = false;
  int window = 0;  // a sliding window, in positions (0: none)
  bool sinks = false;  // a sink logit per query head (gpt-oss)
  float softcap = 0;   // scores soft-capped (Gemma 2)
};

inline std::string name(const Case& c) {
  return "batch " + std::to_string(c.batch) + " kv_heads " + std::to_string(c.n_kv_heads) + " group " +
         std::to_string(c.group) + " d " + std::to_string(c.d) + " " + kv_type_name(c.type) + " seed " +
         std::to_string(c.seed) + (c.prefill ? " prefill" : "") +
         (c.window ? " window " + std::to_string(c.window) : "") + (c.sinks ? " sinks" : "") +
         (c.softcap != 0 ? " softcap " + std::to_string(c.softcap) : "");
}

// Random K/V for tokens [from, to) of sequence id, every layer and KV head.
inline void write_random_kv(HostTree& t, SeqId id, int from, int to, std::mt19937& rng,
                     std::normal_distribution<float>& nd) {
  const KvLayout& L = t.layout();
  std::vector<float> k(size_t(L.head_dim)), v(size_t(L.head_dim));
  for (int i = from; i < to; ++i)
    for (int l = 0; l < L.n_layers; ++l)
      for (int h = 0; h < L.n_kv_heads; ++h) {
        for (int x = 0; x < L.head_dim; ++x) k[size_t(x)] = nd(rng), v[size_t(x)] = nd(rng);
        t.write_kv(id, i, l, h, k.data(), v.data());
      }
}

// A plan and a workspace for attention problems on one tree.
struct Planned {
  const HostTree& tree;
  AttnPlan plan;
  AttnWorkspace ws;
  Planned(HostTree& t, std::vector<int> q_begin, int n_heads)
      : tree(t), plan(plan_attention(t.plan_input(), q_begin, n_heads)) {}
  Planned(const HostTree& t, std::shared_ptr<const KernelContext> ctx, int n_heads)
      : tree(t), plan(plan_attention(t.plan_input(std::move(ctx)), {}, n_heads)) {}
  std::vector<int> window_first;  // per query row, when a window is set
  std::vector<float> sinks;       // per query head, when set
  float softcap = 0;
  AttnProblem problem(const float* q, float* out, int layer = 0) {
    return {&tree.pool(), &plan, layer, q, out, &ws, window_first.empty() ? nullptr : window_first.data(),
            sinks.empty() ? nullptr : sinks.data(), softcap};
  }
  // A sliding window of w positions (a sequence's keys at 0, 1, 2, ...): the
  // k-th of n rows of a sequence of L keys is key L - n + k.
  void set_window(int w) {
    window_first.clear();
    for (int i = 0; i < plan.n_seqs(); ++i) {
      const int len = plan.seq_len[size_t(i)], n = plan.rows_of(i);
      for (int k = 0; k < n; ++k) window_first.push_back(std::max(0, len - n + k - w + 1));
    }
  }
};

// A random tree: sequences in a few families (shared prefixes of random
// length, so some end mid-chunk and get copied), private suffixes of random
// length (some empty), a few forks; random K/V for every appended token.
struct World {
  std::unique_ptr<HostTree> tree;
  std::shared_ptr<const KernelContext> ctx;
  std::vector<float> q;
  std::vector<int> q_begin;
  int n_heads = 0;
  int window = 0;
  std::vector<float> sinks;
  float softcap = 0;

  World(const Case& c) : window(c.window), softcap(c.softcap) {
    std::mt19937 rng(c.seed);
    std::normal_distribution<float> nd;
    const KvLayout L{2, c.n_kv_heads, c.d, 64, c.type};
    tree = std::make_unique<HostTree>(L, L.chunk_bytes() * size_t(c.batch * 8 + 64));
    n_heads = c.n_kv_heads * c.group;
    std::vector<std::vector<int32_t>> families;
    for (int f = 0; f < 1 + int(rng() % 4); ++f) {
      std::vector<int32_t> fam(size_t(rng() % 300));
      for (auto& t : fam) t = int32_t(rng() % 50);
      families.push_back(fam);
    }
    SeqId id = 0;
    while (int(tree->context()->seqs.size()) < c.batch) {
      const int live = int(tree->context()->seqs.size());
      if (live > 0 && rng() % 6 == 0) {  // fork a live sequence
        if (!tree->fork(tree->context()->seqs[rng() % size_t(live)], id++).ok()) std::abort();
        continue;
      }
      std::vector<int32_t> prompt = families[rng() % families.size()];
      prompt.resize(std::min(prompt.size(), size_t(rng() % (prompt.size() + 1))));
      for (int n = int(rng() % 3 == 0 ? 0 : rng() % 90); n > 0; --n) prompt.push_back(int32_t(50 + rng() % 1000));
      if (prompt.empty()) prompt.push_back(7);
      int m;
      if (!tree->join(id, prompt, &m).ok()) std::abort();
      if (!tree->append(id, std::span(prompt).subspan(size_t(m))).ok()) std::abort();
      write_random_kv(*tree, id, m, int(prompt.size()), rng, nd);
      ++id;
    }
    ctx = tree->context();
    int rows = 0;
    for (SeqId s : ctx->seqs) {
      q_begin.push_back(rows);
      rows += c.prefill ? 1 + int(rng() % std::min(4u, uint32_t(tree->length(s)))) : 1;
    }
    q_begin.push_back(rows);
    if (!c.prefill) q_begin.clear();
    q.resize(size_t(rows) * n_heads * c.d);
    for (auto& x : q) x = nd(rng) * 2;
    // Sinks about the scores' size (q is 2 N(0,1), so scores are ~2): some
    // rows' sinks dominate, some hardly count.
    if (c.sinks)
      for (int h = 0; h < n_heads; ++h) sinks.push_back(2.0f * nd(rng));
  }

  AttnProblem problem(std::vector<float>& out) {
    if (!run) {
      run = std::make_unique<Planned>(*tree, q_begin, n_heads);
      if (window) run->set_window(window);
      run->sinks = sinks;
      run->softcap = softcap;
    }
    out.assign(q.size(), NAN);
    return run->problem(q.data(), out.data(), 1);
  }
  std::unique_ptr<Planned> run;
};

inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

// True when no sequence reads shared chunks of two different reader sets.
inline bool single_run(const KernelContext& ctx) {
  for (size_t a = 0; a < ctx.shared.size(); ++a)
    for (size_t b = a + 1; b < ctx.shared.size(); ++b) {
      const auto &x = ctx.shared[a].readers, &y = ctx.shared[b].readers;
      const bool overlap = std::find_first_of(x.begin(), x.end(), y.begin(), y.end()) != x.end();
      if (overlap && x != y) return false;
    }
  return true;
}

}  // namespace cs::test
