// In-process A/B of the CPU's float matmul (F32, F16 and BF16 files, widened
// to fp32 at load): A is the kernel before e61204e (each dot an `omp simd
// reduction`, whose lane order the compiler picked), B is the library's
// matmul() now (model/matmul.cpp: 32 fma lanes in a fixed order, so that the
// GPU's float matmul gives its bits). Interleaved rounds on SmolLM2-135M's
// shapes; prints the best time of each, B's speed-up on the best times and
// the median of the rounds' ratios. Run by matmul_f32_ab.sh.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "model/matmul.h"

namespace {

void matmul_before(const float* W, int64_t rows, int64_t cols, const float* x, int n_tok, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = W + r * cols;
    for (int t = 0; t < n_tok; ++t) {
      const float* xt = x + size_t(t) * cols;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < cols; ++c) s += wr[c] * xt[c];
      y[size_t(t) * rows + r] = s;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  struct Shape {
    int64_t rows, cols;
    int n_tok;
    const char* name;
  };
  const Shape shapes[] = {{1536, 576, 1, "gate 1536x576, 1 token"},     {576, 1536, 1, "down 576x1536, 1 token"},
                          {49152, 576, 1, "head 49152x576, 1 token"},   {1536, 576, 64, "gate 1536x576, 64 tokens"},
                          {576, 1536, 64, "down 576x1536, 64 tokens"}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::printf("| shape | threads | A: omp simd reduction | B: fixed lanes | B/A speed (best) | median of rounds |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    std::vector<float> W(size_t(s.rows * s.cols)), x(size_t(s.n_tok) * size_t(s.cols));
    std::vector<float> ya(size_t(s.n_tok) * size_t(s.rows)), yb = ya;
    for (auto& v : W) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    const cs::Weight w = cs::make_weight(cs::GgmlType::F32, s.rows, s.cols, reinterpret_cast<const uint8_t*>(W.data()));
    std::vector<cs::BlockQ8> scratch;
    const int reps = int(std::max<int64_t>(1, 200000000 / (s.rows * s.cols * s.n_tok)));
    std::vector<double> ta, tb, ratio;
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 2; ++v) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) {
          if (v == 0) matmul_before(W.data(), s.rows, s.cols, x.data(), s.n_tok, ya.data());
          else cs::matmul(w, x.data(), s.n_tok, yb.data(), scratch);
        }
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        (v == 0 ? ta : tb).push_back(us / reps);
      }
      ratio.push_back(ta.back() / tb.back());
    }
    std::sort(ratio.begin(), ratio.end());
    const double kflop = 2.0 * double(s.rows * s.cols * s.n_tok) / 1e3;  // per µs: GFLOP/s
    const double a = *std::min_element(ta.begin(), ta.end()), b = *std::min_element(tb.begin(), tb.end());
    std::printf("| %s | %d | %.1f µs (%.1f GFLOP/s) | %.1f µs (%.1f GFLOP/s) | %.2fx | %.2fx |\n", s.name,
                omp_get_max_threads(), a, kflop / a, b, kflop / b, a / b, ratio[ratio.size() / 2]);
  }
}
