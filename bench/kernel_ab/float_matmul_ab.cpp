// In-process A/B of the CPU's float matmul (F32, F16 and BF16 files). A is
// the kernel of e61204e..this change: the matrix widened to an fp32 copy at
// load, each (row, token) dot in the 32-lane order on its own. B is the
// library's matmul() now: the file's 16-bit values widened in registers, a
// row's values loaded once for two tokens, tokens in L2-sized tiles; the same
// bits (checked here too). Interleaved rounds on SmolLM2-135M's shapes;
// prints the best time of each, B's speed-up on the best times and the
// median of the rounds' ratios. Run by float_matmul_ab.sh.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/f16.h"
#include "model/matmul.h"

namespace {

float dot_lanes_before(const float* w, const float* x, int64_t n) {
  float acc[32] = {};
  int64_t c = 0;
  for (; c + 32 <= n; c += 32)
    for (int j = 0; j < 32; ++j) acc[j] = std::fma(w[c + j], x[c + j], acc[j]);
  for (int j = 0; c + j < n; ++j) acc[j] = std::fma(w[c + j], x[c + j], acc[j]);
  for (int h = 16; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
  return acc[0];
}

void matmul_before(const float* W, int64_t rows, int64_t cols, const float* x, int n_tok, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int t = 0; t < n_tok; ++t) y[size_t(t) * rows + r] = dot_lanes_before(W + r * cols, x + size_t(t) * cols, cols);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  struct Shape {
    int64_t rows, cols;
    int n_tok;
    const char* name;
  };
  const Shape shapes[] = {{1536, 576, 1, "gate 1536x576, 1 token"},    {576, 1536, 1, "down 576x1536, 1 token"},
                          {49152, 576, 1, "head 49152x576, 1 token"},  {1536, 576, 64, "gate 1536x576, 64 tokens"},
                          {576, 1536, 64, "down 576x1536, 64 tokens"}, {1536, 576, 512, "gate 1536x576, 512 tokens"}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::printf("| shape | threads | A: fp32 copy, a token at a time | B: F16 as the file has it | B/A speed (best) | median of rounds |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const size_t n = size_t(s.rows * s.cols);
    std::vector<uint16_t> file(n);
    std::vector<float> wide(n), x(size_t(s.n_tok) * size_t(s.cols));
    for (size_t i = 0; i < n; ++i) file[i] = cs::f32_to_f16(nd(rng)), wide[i] = cs::f16_to_f32(file[i]);
    for (auto& v : x) v = nd(rng);
    std::vector<float> ya(size_t(s.n_tok) * size_t(s.rows)), yb = ya;
    const cs::Weight w = cs::make_weight(cs::GgmlType::F16, s.rows, s.cols, reinterpret_cast<const uint8_t*>(file.data()));
    std::vector<cs::BlockQ8> scratch;
    const int reps = int(std::max<int64_t>(1, 200000000 / (s.rows * s.cols * s.n_tok)));
    std::vector<double> ta, tb, ratio;
    for (int r = 0; r < rounds; ++r) {
      for (int v = 0; v < 2; ++v) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) {
          if (v == 0) matmul_before(wide.data(), s.rows, s.cols, x.data(), s.n_tok, ya.data());
          else cs::matmul(w, x.data(), s.n_tok, yb.data(), scratch);
        }
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        (v == 0 ? ta : tb).push_back(us / reps);
      }
      ratio.push_back(ta.back() / tb.back());
    }
    if (std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)) != 0) {
      std::fprintf(stderr, "%s: A and B differ\n", s.name);
      return 1;
    }
    std::sort(ratio.begin(), ratio.end());
    const double kflop = 2.0 * double(s.rows * s.cols * s.n_tok) / 1e3;  // per µs: GFLOP/s
    const double a = *std::min_element(ta.begin(), ta.end()), b = *std::min_element(tb.begin(), tb.end());
    std::printf("| %s | %d | %.1f µs (%.1f GFLOP/s) | %.1f µs (%.1f GFLOP/s) | %.2fx | %.2fx |\n", s.name,
                omp_get_max_threads(), a, kflop / a, b, kflop / b, a / b, ratio[ratio.size() / 2]);
  }
}
