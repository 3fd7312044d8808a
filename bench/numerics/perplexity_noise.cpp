// How far a rounding-sized change to the attention moves a file's perplexity
// and top-1 tokens on the CPU alone: the noise floor against which the GPU's
// perplexity is judged (issue 45; docs/benchmarks.md, "GPU perplexity").
//
//   ninja -C build perplexity_noise
//   build/perplexity_noise MODEL [--ctx 128] [--windows 0] [--second-half] [--seeds 10] [--layer L]
//
// Every window of tests/data/perplexity_text.md (as CudaModel's perplexity
// test tokenizes it) runs once as is and once per variant, each with its KV
// in a contiguous f16 cache; a variant changes only the queries the cache's
// attention sees (a KvStore wrapped around it), or the SIMD level:
//   - the queries copied unchanged (the wrapper alone: every bit the same);
//   - the queries rounded to fp16 after scaling by log2(e) / sqrt(head_dim),
//     as the GPU's attention kernels give them to the tensor cores;
//   - each query element times (1 + u 2^-11), u uniform in [-1, 1] (about one
//     fp16 rounding), per seed; and times (1 + u 2^-21), near f32's own;
//   - the CPU's AVX2 kernels instead of AVX-512 (where the host has both).
// Printed per variant: the perplexity ratio to the unchanged run, the rows
// whose top-1 token differs, and the widest top-two gap (unchanged run's) at
// such a row. Scored rows: 1 .. ctx - 2 of each window (--second-half: the
// CLI's ctx / 2 .. ctx - 2). --layer L changes the queries of layer L only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/f16.h"
#include "cache/contiguous_kv.h"
#include "engine/sampler.h"
#include "model/llama.h"
#include "model/perplexity.h"

namespace cs {
namespace {

using Perturb = std::function<void(std::vector<float>&)>;

// A store that hands its inner store's attention changed queries.
class PerturbedKv final : public KvStore {
 public:
  PerturbedKv(KvStore& inner, const KvShape& shape, Perturb perturb, int only_layer)
      : inner_(inner),
        width_(size_t(shape.n_heads) * size_t(shape.head_dim)),
        perturb_(std::move(perturb)),
        only_layer_(only_layer) {}
  void begin_batch(const Batch& b) override {
    rows_ = size_t(b.size());
    inner_.begin_batch(b);
  }
  void store(int layer, const float* k, const float* v) override { inner_.store(layer, k, v); }
  void attend(int layer, const float* q, float* out, const LayerAttention& how) override {
    q_.assign(q, q + rows_ * width_);
    if (only_layer_ < 0 || layer == only_layer_) perturb_(q_);
    inner_.attend(layer, q_.data(), out, how);
  }

 private:
  KvStore& inner_;
  size_t width_, rows_ = 0;
  Perturb perturb_;
  int only_layer_;
  std::vector<float> q_;
};

struct Row {
  int top = 0;
  float gap = 0;  // top-1 log-probability minus top-2
  double nll = 0;
};

struct Setup {
  int n_ctx = 128, max_windows = 0, first = 1;
  int only_layer = -1;  // -1: change the queries of every layer
};

std::vector<Row> score(const LlamaModel& m, const std::vector<std::vector<int32_t>>& windows, const Setup& s,
                       const Perturb& perturb) {
  std::vector<Row> rows;
  const size_t V = size_t(m.config().n_vocab);
  for (const auto& w : windows) {
    ContiguousKv kc(m.config().kv_shape(), s.n_ctx);
    PerturbedKv pk(kc, m.config().kv_shape(), perturb ? perturb : [](std::vector<float>&) {}, s.only_layer);
    Workspace ws;
    Batch b;
    for (int i = 0; i < s.n_ctx; ++i) b.add(w[size_t(i)], i, 0, i >= s.first && i < s.n_ctx - 1);
    std::vector<float> out;
    m.forward(b, pk, ws, out);
    for (int i = s.first; i < s.n_ctx - 1; ++i) {
      const std::span<const float> r(out.data() + size_t(i - s.first) * V, V);
      const auto top = top_logprobs(r, 2);
      rows.push_back(Row{top[0].first, top[0].second - top[1].second, token_nll(r, w[size_t(i + 1)])});
    }
  }
  return rows;
}

double ppl(const std::vector<Row>& rows) {
  double s = 0;
  for (const Row& r : rows) s += r.nll;
  return std::exp(s / double(rows.size()));
}

// One table line; returns the perplexity ratio.
double report(const char* name, const std::vector<Row>& base, const std::vector<Row>& x) {
  int differ = 0;
  float widest = 0;
  for (size_t i = 0; i < base.size(); ++i)
    if (base[i].top != x[i].top) ++differ, widest = std::max(widest, base[i].gap);
  const double ratio = ppl(x) / ppl(base);
  char gap[32] = "-";
  if (differ) std::snprintf(gap, sizeof gap, "%.3f nats", double(widest));
  std::printf("| %s | %.5f | %d (%.2f%%) | %s |\n", name, ratio, differ, 100.0 * differ / double(base.size()), gap);
  return ratio;
}

Perturb relative_noise(unsigned seed, float size) {
  return [rng = std::make_shared<std::mt19937>(seed), size](std::vector<float>& q) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& x : q) x *= 1.f + u(*rng) * size;
  };
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: perplexity_noise MODEL [--ctx N] [--windows N] [--second-half] [--seeds N] [--layer L]\n");
    return 2;
  }
  Setup s;
  int seeds = 10;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ctx" && i + 1 < argc) s.n_ctx = std::atoi(argv[++i]);
    else if (a == "--windows" && i + 1 < argc) s.max_windows = std::atoi(argv[++i]);
    else if (a == "--seeds" && i + 1 < argc) seeds = std::atoi(argv[++i]);
    else if (a == "--layer" && i + 1 < argc) s.only_layer = std::atoi(argv[++i]);
    else if (a == "--second-half") s.first = -1;
    else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (s.first < 0) s.first = s.n_ctx / 2;
  auto model = LlamaModel::load(argv[1]);
  std::ifstream f(CS_PERPLEXITY_TEXT);
  std::stringstream text;
  text << f.rdbuf();
  const std::vector<int32_t> tokens = model->tokenizer().encode(text.str(), true);
  const auto windows = perplexity_windows(tokens, s.n_ctx, s.max_windows,
                                          model->tokenizer().wants_bos() ? model->tokenizer().bos() : -1);
  const auto base = score(*model, windows, s, nullptr);
  std::printf("%s: %zu windows of %d tokens, %zu rows scored, perplexity %.4f; CPU %s\n\n", argv[1], windows.size(),
              s.n_ctx, base.size(), ppl(base), isa_name(cpu_isa()));
  std::printf("| variant | perplexity ratio | top-1 differs | widest top-two gap there |\n|---|---|---|---|\n");
  const float log2e_over_sqrt_d = float(1.4426950408889634 / std::sqrt(double(model->config().kv_shape().head_dim)));
  report("queries copied unchanged (the wrapper alone)", base, score(*model, windows, s, [](std::vector<float>&) {}));
  report("queries rounded to fp16 (the GPU's)", base, score(*model, windows, s, [&](std::vector<float>& q) {
           for (float& x : q) x = f16_to_f32(f32_to_f16(x * log2e_over_sqrt_d)) / log2e_over_sqrt_d;
         }));
  double sum = 0, sq = 0, lo = 1e9, hi = 0;
  for (int k = 1; k <= seeds; ++k) {
    const double r = report(("queries x (1 + u 2^-11), seed " + std::to_string(k)).c_str(), base,
                            score(*model, windows, s, relative_noise(unsigned(k), 0x1p-11f)));
    sum += r, sq += r * r, lo = std::min(lo, r), hi = std::max(hi, r);
  }
  report("queries x (1 + u 2^-21), seed 1", base, score(*model, windows, s, relative_noise(1u, 0x1p-21f)));
  if (cpu_isa() == Isa::kAvx512) {
    set_isa_for_testing(Isa::kAvx2);
    auto avx2 = LlamaModel::load(argv[1]);
    report("AVX2 kernels instead of AVX-512", base, score(*avx2, windows, s, nullptr));
    set_isa_for_testing(Isa::kAvx512);
  }
  if (seeds > 1) {
    const double mean = sum / seeds, sd = std::sqrt(std::max(0.0, sq / seeds - mean * mean));
    std::printf("\nthe %d seeds' ratios: mean %.5f, standard deviation %.5f, range %.5f .. %.5f\n", seeds, mean, sd,
                lo, hi);
  }
  return 0;
}

}  // namespace
}  // namespace cs

int main(int argc, char** argv) { return cs::run(argc, argv); }
