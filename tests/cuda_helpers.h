// What the GPU tests share: skipping without a device, copies to and from
// it, and random quantized matrices.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cuda.h"
#include "base/f16.h"
#include "model/ggml_types.h"

namespace cs {

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    std::string why;                                                      \
    if (!cuda::device_available(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

template <class T>
cuda::Buffer upload(const std::vector<T>& v) {
  cuda::Buffer b(std::max<size_t>(v.size(), 1) * sizeof(T));
  cuda::to_device(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> download(const cuda::Buffer& b, size_t n) {
  std::vector<T> v(n);
  cuda::to_host(v.data(), b.get(), n * sizeof(T));
  return v;
}

// n values of N(0, sd^2).
inline std::vector<float> normal(size_t n, unsigned seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Activations as a layer's input looks: normal values, a few outliers (as
// SmolLM2's channels), and an all-zero row (amax 0).
inline std::vector<float> activations(int n_tok, int cols, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n_tok) * cols);
  for (auto& v : x) v = nd(rng);
  for (int t = 0; t < n_tok; ++t) x[size_t(t) * cols + size_t(rng() % cols)] *= 300.0f;
  if (n_tok > 2) std::fill_n(x.begin() + cols, cols, 0.0f);
  return x;
}

// A quantized matrix of random blocks: random bytes, with finite fp16
// scales (d at each block's start, and the minimum after it where the type
// has one).
inline std::vector<uint8_t> random_matrix(GgmlType t, int rows, int cols, std::mt19937& rng) {
  const TypeInfo info = *type_info(uint32_t(t));
  std::vector<uint8_t> data(size_t(rows) * cols / info.block_elems * info.block_bytes);
  for (auto& v : data) v = uint8_t(rng() & 0xff);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
                       t == GgmlType::Q2_K;
  // Where each type keeps its fp16 d (and dmin after it): finite scales.
  const size_t d_at = t == GgmlType::Q6_K   ? offsetof(BlockQ6_K, d)
                      : t == GgmlType::Q2_K ? offsetof(BlockQ2_K, d)
                      : t == GgmlType::Q3_K ? offsetof(BlockQ3_K, d)
                                            : 0;
  for (size_t off = 0; off + info.block_bytes <= data.size(); off += size_t(info.block_bytes)) {
    if (t == GgmlType::MXFP4) {  // an E8M0 exponent near 2^0
      data[off] = uint8_t(120 + rng() % 12);
      continue;
    }
    const uint16_t d = f32_to_f16(scale(rng)), m = f32_to_f16(-scale(rng) * 8);
    std::memcpy(&data[off + d_at], &d, 2);
    if (has_min) std::memcpy(&data[off + d_at + 2], &m, 2);
  }
  return data;
}

}  // namespace cs
