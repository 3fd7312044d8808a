// In-process A/B of the AVX2 integer kernels on repacked weights
// (model/qdot_avx2.cpp): A at a git revision, B in the working tree, each
// compiled into its own namespace by qdot_ab.sh. A decode step's weights are
// the point: every case cycles through a model's worth of matrices larger
// than the L3, so each call streams its weights from memory as a layer of a
// decode step does. Interleaved rounds; prints the best time of each, the
// weight bytes per second, B's speed-up on the best times and the median of
// the rounds' ratios, and checks that both give the same bits.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/f16.h"
#include "model/matmul.h"
#include "qdot_ab_variants.h"  // A::qdot16*, B::qdot16* (written by qdot_ab.sh)

namespace {

using Kernel16 = void (*)(const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);
using Kernel16q8 = void (*)(cs::PackLayout, const uint32_t*, int, int, const cs::BlockQ8*, int, float*, int);

// Random blocks of type t with finite, realistic fp16 scales (d, and the
// minimum's beside it where the type has one).
std::vector<uint8_t> random_rows(cs::GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const cs::TypeInfo info = *cs::type_info(uint32_t(t));
  std::vector<uint8_t> data(size_t(rows * cols / info.block_elems * info.block_bytes));
  for (auto& v : data) v = uint8_t(rng());
  const size_t d_at = t == cs::GgmlType::Q6_K ? offsetof(cs::BlockQ6_K, d) : 0;
  const bool has_min = t == cs::GgmlType::Q4_1 || t == cs::GgmlType::Q4_K;
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (size_t off = 0; off < data.size(); off += size_t(info.block_bytes)) {
    const uint16_t d = cs::f32_to_f16(scale(rng)), m = cs::f32_to_f16(-scale(rng) * 8);
    std::memcpy(&data[off + d_at], &d, 2);
    if (has_min) std::memcpy(&data[off + d_at + 2], &m, 2);
  }
  return data;
}

// y = W x for n_tok activation rows, 16-row groups split over the threads as
// the library's dot_tiles splits them.
void run(int variant, const cs::Weight& w, const cs::BlockQ8* acts, int n_tok, float* y) {
  const cs::PackLayout layout = cs::pack_layout(w.type);
  const int nb = int(w.cols / 32), groups = int((w.rows + 15) / 16);
  const size_t group_words = cs::pack_group_words(layout, nb);
  const bool q4 = layout == cs::PackLayout::kQ4;
#pragma omp parallel for schedule(static)
  for (int g = 0; g < groups; ++g) {
    const int nr = int(std::min<int64_t>(16, w.rows - int64_t(g) * 16));
    const uint32_t* group = w.packed.data() + size_t(g) * group_words;
    float* yg = y + size_t(g) * 16;
    if (q4) (variant == 0 ? A::qdot16 : B::qdot16)(group, nb, nr, acts, n_tok, yg, int(w.rows));
    else (variant == 0 ? A::qdot16q8 : B::qdot16q8)(layout, group, nb, nr, acts, n_tok, yg, int(w.rows));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  struct Case {
    cs::GgmlType type;
    int64_t d, ffn;  // a layer: q, o (d x d), k, v (d/3 x d), gate, up (ffn x d), down (d x ffn)
    int n_tok;
    const char* name;
  };
  const Case cases[] = {
      {cs::GgmlType::Q4_1, 576, 1536, 1, "Q4_1, SmolLM2-135M's layers, 1 token"},
      {cs::GgmlType::Q4_1, 576, 1536, 2, "Q4_1, SmolLM2-135M's layers, 2 tokens"},
      {cs::GgmlType::Q8_0, 576, 1536, 1, "Q8_0, SmolLM2-135M's layers, 1 token"},
      {cs::GgmlType::Q8_0, 576, 1536, 2, "Q8_0, SmolLM2-135M's layers, 2 tokens (the refined head)"},
      {cs::GgmlType::Q4_K, 2048, 8192, 1, "Q4_K, Llama-3.2-1B's layers, 1 token"},
      {cs::GgmlType::Q6_K, 2048, 8192, 1, "Q6_K, Llama-3.2-1B's layers, 1 token"},
      {cs::GgmlType::Q4_K, 2048, 8192, 4, "Q4_K, Llama-3.2-1B's layers, 4 tokens (unchanged path)"},
  };
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::printf("threads %d\n\n", omp_get_max_threads());
  std::printf("| case | layers | A: best ms (weights GB/s) | B: best ms (weights GB/s) | B/A speed (best) | median of rounds |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    // Enough layers for ~160 MB of repacked weights: well past a 32 MB L3.
    std::vector<std::pair<int64_t, int64_t>> shapes;
    const std::pair<int64_t, int64_t> layer[] = {{c.d, c.d}, {c.d / 3, c.d}, {c.d / 3, c.d}, {c.d, c.d},
                                                 {c.ffn, c.d}, {c.ffn, c.d}, {c.d, c.ffn}};
    std::vector<cs::Weight> ws;
    size_t bytes = 0;
    int layers = 0;
    while (bytes < (size_t(160) << 20)) {
      for (const auto& [rows, cols] : layer) {
        const auto data = random_rows(c.type, rows, cols, rng);
        ws.push_back(cs::make_weight(c.type, rows, cols, data.data()));
        bytes += ws.back().packed.size() * 4;
      }
      ++layers;
    }
    std::vector<std::vector<cs::BlockQ8>> acts(2);
    for (int64_t cols : {c.d, c.ffn}) {
      std::vector<float> x(size_t(c.n_tok * cols));
      for (auto& v : x) v = nd(rng);
      auto& a = acts[cols == c.d ? 0 : 1];
      a.resize(size_t(c.n_tok * cols / 32));
      for (int t = 0; t < c.n_tok; ++t) cs::quantize_q8(&x[size_t(t * cols)], size_t(cols), &a[size_t(t * cols / 32)]);
    }
    std::vector<std::vector<float>> ya(ws.size()), yb(ws.size());
    for (size_t i = 0; i < ws.size(); ++i) ya[i].resize(size_t(ws[i].rows * c.n_tok)), yb[i] = ya[i];
    std::vector<double> ta, tb, ratio;
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 2; ++v) {
        auto& y = v == 0 ? ya : yb;
        const auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < ws.size(); ++i)
          run(v, ws[i], acts[ws[i].cols == c.d ? 0 : 1].data(), c.n_tok, y[i].data());
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        (v == 0 ? ta : tb).push_back(ms);
      }
      ratio.push_back(ta.back() / tb.back());
    }
    for (size_t i = 0; i < ws.size(); ++i)
      if (std::memcmp(ya[i].data(), yb[i].data(), ya[i].size() * 4) != 0) {
        std::printf("%s: A and B differ in matrix %zu\n", c.name, i);
        return 1;
      }
    const double ba = *std::min_element(ta.begin(), ta.end()), bb = *std::min_element(tb.begin(), tb.end());
    std::sort(ratio.begin(), ratio.end());
    std::printf("| %s | %d | %.2f (%.1f) | %.2f (%.1f) | %.2fx | %.2fx |\n", c.name, layers, ba, bytes / ba / 1e6, bb,
                bytes / bb / 1e6, ba / bb, ratio[ratio.size() / 2]);
  }
}
