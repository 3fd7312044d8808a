#include "cli/roofline.h"

// GCC 12 warns inside avx512fintrin.h (_mm512_undefined_*), not about this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/cpu.h"

namespace cs {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__attribute__((target("avx512f"))) float fma_loop_512(long iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

float fma_loop_256(long iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

// Sums n floats (n % 64 == 0) with four independent vector accumulators.
float read_sum(const float* p, size_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 32) {
    a = _mm256_add_ps(a, _mm256_load_ps(p + i));
    b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
    c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
    d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
  return out[0] + out[7];
}

}  // namespace

Roofline measure_roofline() {
  Roofline r;
  // Read bandwidth: 1 GiB, each thread streams its half, best of 5.
  const size_t n = (size_t(1) << 30) / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i += 1024) std::fill(buf + i, buf + i + 1024, 1.0f);
  double best = 1e30;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now();
#pragma omp parallel
    {
      const int nt = omp_get_num_threads(), me = omp_get_thread_num();
      const size_t per = n / size_t(nt) / 64 * 64;
      sink = sink + read_sum(buf + per * size_t(me), per);
    }
    best = std::min(best, now() - t0);
  }
  std::free(buf);
  r.read_gbs = double(n) * sizeof(float) / best / 1e9;

  double peak = 0;
  for (int rep = 0; rep < 3; ++rep) peak = std::max(peak, fma_probe_gflops(20000000));
  r.fp32_gflops = peak;
  return r;
}

double fma_probe_gflops(long iters) {
  const bool wide = cpu_isa() == Isa::kAvx512;
  volatile float sink = 0;
  const double t0 = now();
#pragma omp parallel
  { sink = sink + (wide ? fma_loop_512(iters) : fma_loop_256(iters)); }
  const double t = now() - t0;
  const double flops = double(omp_get_max_threads()) * double(iters) * 12 * (wide ? 16 : 8) * 2;
  return flops / t / 1e9;
}

}  // namespace cs
