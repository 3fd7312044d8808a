// The device matmul (model/cuda_matmul.h) against the CPU's, bit for bit:
// the same activation blocks from the same floats, the same products from
// the same blocks, whatever the token count, so a row's result on the GPU
// depends on that row alone. Where no GPU is present each test says so and
// skips, except those of what fails without one.
#include "model/cuda_matmul.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "base/cpu.h"
#include "base/error.h"
#include "base/f16.h"
#include "cuda_helpers.h"
#include "model/matmul.h"

namespace cs {
namespace {

// Runs `device(dx, dy)` on x (n_tok rows) copied to the device, and asserts
// that what it wrote to dy is the CPU's matmul of w by x bit for bit (a NaN
// left unwritten never equals it).
template <class Device>
void expect_the_cpus_bits(const Weight& w, const std::vector<float>& x, int n_tok, Device device) {
  std::vector<float> want(size_t(n_tok) * size_t(w.rows));
  std::vector<BlockQ8> scratch;
  matmul(w, x.data(), n_tok, want.data(), scratch);
  const cuda::Buffer dx = upload(x);
  cuda::Buffer dy(want.size() * sizeof(float));
  cuda::memset_device(dy.get(), 0xff, dy.bytes());  // NaN: an output not written fails, whatever memory held before
  device(dx.as<float>(), dy.as<float>());
  const std::vector<float> got = download<float>(dy, want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "token " << i / size_t(w.rows) << " row " << i % size_t(w.rows);
}

TEST(CudaMatmul, QuantizesAsTheCpuDoes) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int cols : {32, 576, 2048}) {
    const int n_tok = 7;
    const std::vector<float> x = activations(n_tok, cols, rng);
    std::vector<BlockQ8> want(size_t(n_tok) * cols / 32);
    quantize_q8(x.data(), x.size(), want.data());
    const cuda::Buffer dx = upload(x);
    cuda::Buffer dq(want.size() * sizeof(BlockQ8));
    cuda::quantize_q8(dx.as<float>(), n_tok, cols, dq.as<BlockQ8>());
    const std::vector<BlockQ8> got = download<BlockQ8>(dq, want.size());
    for (size_t b = 0; b < want.size(); ++b)
      ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(BlockQ8)), 0)
          << "cols " << cols << " block " << b << ": d " << got[b].d << " vs " << want[b].d << ", s " << got[b].s
          << " vs " << want[b].s << ", sum " << got[b].sum << " vs " << want[b].sum;
  }
}

TEST(CudaMatmul, EqualsTheCpuBitForBitWhateverTheTokenCount) {
  REQUIRE_GPU();
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the CPU reference is the AVX2 / AVX-512 kernels' bits";
  std::mt19937 rng(7);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL,
                     GgmlType::IQ4_XS, GgmlType::MXFP4})
    for (const auto& [rows, cols] : {std::pair{16, 256}, std::pair{37, 256}, std::pair{576, 512}, std::pair{200, 1536}}) {
      const auto data = random_matrix(t, rows, cols, rng);
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_TRUE(cuda::matmul_supports(t));
      const cuda::DeviceMatrix dw(w);
      for (int n_tok : {1, 2, 7, 8, 9, 33, 70}) {
        SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols) + " tokens " + std::to_string(n_tok));
        cuda::Buffer dq(size_t(n_tok) * cols / 32 * sizeof(BlockQ8));
        const std::vector<float> x = activations(n_tok, cols, rng);
        for (auto kernel : {cuda::MatmulKernel::kAuto, cuda::MatmulKernel::kTile, cuda::MatmulKernel::kSplit,
                            cuda::MatmulKernel::kStream, cuda::MatmulKernel::kStaged}) {
          SCOPED_TRACE("kernel " + std::to_string(int(kernel)));
          expect_the_cpus_bits(w, x, n_tok, [&](const float* dx, float* dy) {
            cuda::quantize_q8(dx, n_tok, cols, dq.as<BlockQ8>());
            cuda::matmul(dw, dq.as<BlockQ8>(), n_tok, dy, kernel);
          });
        }
      }
    }
}

// Float matrices as the file has them, times float activations: the CPU's
// matmul of the same matrix bit for bit, whatever the token count.
TEST(CudaMatmul, FloatMatricesEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.0f, 0.5f);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (const auto& [rows, cols] : {std::pair{37, 100}, std::pair{576, 512}, std::pair{200, 1536}}) {
      std::vector<uint8_t> data(size_t(rows) * size_t(cols) * (t == GgmlType::F32 ? 4 : 2));
      for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) {
        const float v = value(rng);
        const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        if (t == GgmlType::F32) std::memcpy(data.data() + 4 * i, &v, 4);
        else std::memcpy(data.data() + 2 * i, &h, 2);
      }
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_TRUE(cuda::float_matrix(t));
      const cuda::DeviceMatrix dw(t, rows, cols, data.data());
      for (int n_tok : {1, 7, 8, 9, 70}) {
        SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols) + " tokens " + std::to_string(n_tok));
        expect_the_cpus_bits(w, activations(n_tok, cols, rng), n_tok,
                             [&](const float* dx, float* dy) { cuda::float_matmul(dw, dx, n_tok, dy); });
      }
    }
}

TEST(CudaMatmul, UnsupportedTypesAreAClearError) {
  std::mt19937 rng(9);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS, GgmlType::MXFP4})
    EXPECT_TRUE(cuda::matmul_supports(t));
  EXPECT_FALSE(cuda::matmul_supports(GgmlType::F32));
  EXPECT_FALSE(cuda::matmul_supports(GgmlType::F16));
  std::vector<float> data(16 * 256);
  for (float& v : data) v = float(rng() % 100) / 100.0f;
  const Weight w = make_weight(GgmlType::F32, 16, 256, reinterpret_cast<const uint8_t*>(data.data()));
  try {
    cuda::DeviceMatrix dw(w);
    FAIL() << "an F32 matrix was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("F32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cs
