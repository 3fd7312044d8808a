// The device matmul (model/cuda_matmul.h) against the CPU's, bit for bit:
// the same activation blocks from the same floats, the same products from
// the same blocks, whatever the token count, so a row's result on the GPU
// depends on that row alone. Where no GPU is present each test says so and
// skips, except those of what fails without one.
#include "model/cuda_matmul.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
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

// Several matrices of one layout times the same activations, in as few
// launches as the kernels take (6: one of 4, one of 2): each output the
// CPU's product of its own matrix, by every kernel; matrices of another
// layout or row length are refused by name.
TEST(CudaMatmul, SeveralMatricesInOneLaunchAreEachTheCpus) {
  REQUIRE_GPU();
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the CPU reference is the AVX2 / AVX-512 kernels' bits";
  std::mt19937 rng(13);
  const int cols = 2048;
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const std::vector<int> rows = {2048, 512, 512, 37, 8192, 16};
    std::vector<Weight> ws;
    std::vector<std::unique_ptr<cuda::DeviceMatrix>> dws;
    std::vector<std::vector<uint8_t>> data;
    for (int r : rows) {
      data.push_back(random_matrix(t, r, cols, rng));
      ws.push_back(make_weight(t, r, cols, data.back().data()));
      dws.push_back(std::make_unique<cuda::DeviceMatrix>(ws.back()));
    }
    std::vector<const cuda::DeviceMatrix*> mats;
    for (const auto& d : dws) mats.push_back(d.get());
    for (int n_tok : {1, 9, 40}) {
      SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + ", " + std::to_string(n_tok) + " tokens");
      const std::vector<float> x = activations(n_tok, cols, rng);
      const cuda::Buffer dx = upload(x);
      cuda::Buffer dq(size_t(n_tok) * cols / 32 * sizeof(BlockQ8));
      cuda::quantize_q8(dx.as<float>(), n_tok, cols, dq.as<BlockQ8>());
      std::vector<cuda::Buffer> dys;
      std::vector<float*> ys;
      for (int r : rows) {
        dys.emplace_back(size_t(n_tok) * size_t(r) * sizeof(float));
        ys.push_back(dys.back().as<float>());
      }
      for (auto kernel : {cuda::MatmulKernel::kAuto, cuda::MatmulKernel::kTile, cuda::MatmulKernel::kSplit,
                          cuda::MatmulKernel::kStream, cuda::MatmulKernel::kStaged}) {
        SCOPED_TRACE("kernel " + std::to_string(int(kernel)));
        for (auto& d : dys) cuda::memset_device(d.get(), 0xff, d.bytes());
        cuda::matmul_many(mats, dq.as<BlockQ8>(), n_tok, ys, kernel);
        for (size_t i = 0; i < ws.size(); ++i) {
          std::vector<float> want(size_t(n_tok) * size_t(rows[i]));
          std::vector<BlockQ8> scratch;
          matmul(ws[i], x.data(), n_tok, want.data(), scratch);
          const std::vector<float> got = download<float>(dys[i], want.size());
          for (size_t j = 0; j < want.size(); ++j) ASSERT_EQ(got[j], want[j]) << "matrix " << i << " at " << j;
        }
      }
    }
  }
  const auto a = random_matrix(GgmlType::Q4_K, 16, 256, rng), b = random_matrix(GgmlType::Q6_K, 16, 256, rng);
  const cuda::DeviceMatrix da(make_weight(GgmlType::Q4_K, 16, 256, a.data())),
      db(make_weight(GgmlType::Q6_K, 16, 256, b.data()));
  const cuda::DeviceMatrix* two[] = {&da, &db};
  cuda::Buffer dq(256 / 32 * sizeof(BlockQ8)), dy(2 * 16 * sizeof(float));
  float* ys[] = {dy.as<float>(), dy.as<float>() + 16};
  try {
    cuda::matmul_many(two, dq.as<BlockQ8>(), 1, ys);
    FAIL() << "a Q4_K and a Q6_K matrix were multiplied in one launch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share their layout"), std::string::npos) << e.what();
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
