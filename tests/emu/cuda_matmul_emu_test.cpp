// model/cuda_matmul_kernels.cu run by the CPU emulator (tests/emu/cuda_emu.h:
// a fiber per lane, the m16n8k32 mma from PTX's fragment layout) against
// the CPU's quantize_q8 and matmul, bit for bit: every layout, a partial
// 16-row group, 1 to 40 tokens, by each kernel (tile, split, stream,
// staged) and by the one the shape chooses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/cpu.h"
#include "base/f16.h"
#include "cuda_helpers.h"
#include "model/matmul.h"
#include "cuda_matmul_kernels_emu.inc"

namespace cs {
namespace {

namespace emu = cuda::kernels_emu;

TEST(CudaMatmulEmulated, QuantizesAndMultipliesAsTheCpuDoes) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  std::mt19937 rng(1);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL,
                     GgmlType::IQ4_XS, GgmlType::MXFP4})
    // 37 x 256: the 8-token slices, the last partial (9 tokens), the tile
    // kernel's partial 8-token tiles and idle warps (40), the stream
    // kernel's CTAs (4 on the emulator's 2 SMs) taking 2 of 6 and 4 of 15
    // items, slices of one group and groups apart; 21 x 1280: chunks (40
    // blocks: a partial last chunk of 32 or of 16, whole super-blocks) with
    // 1 token, with all 8 folders, and with 70 (the staged kernel's second
    // CTA of a group: one warp at work, seven idle but copying); 17 x 10240:
    // 10 or 20 chunks a group, so that each ring's slots are refilled.
    for (auto [rows, cols, toks] : {std::tuple{37, 256, std::vector{9, 40}}, std::tuple{21, 1280, std::vector{1, 8, 70}},
                                    std::tuple{17, 10240, std::vector{1, 9}}}) {
      const std::vector<uint8_t> data = random_matrix(t, rows, cols, rng);
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_FALSE(w.packed.empty());
      const int64_t nb = cols / 32;
      for (int n_tok : toks) {
        SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols) + ", " + std::to_string(n_tok) + " tokens");
        const std::vector<float> x = activations(n_tok, cols, rng);
        std::vector<BlockQ8> want_q(size_t(n_tok) * size_t(nb)), got_q(want_q.size());
        quantize_q8(x.data(), x.size(), want_q.data());
        emu::quantize_q8(x.data(), int64_t(want_q.size()), got_q.data());
        ASSERT_EQ(std::memcmp(got_q.data(), want_q.data(), want_q.size() * sizeof(BlockQ8)), 0) << "quantized blocks";
        std::vector<float> want(size_t(n_tok) * size_t(rows)), got(want.size(), NAN);
        std::vector<BlockQ8> scratch;
        matmul(w, x.data(), n_tok, want.data(), scratch);
        for (int kernel : {emu::kAuto, emu::kTile, emu::kSplit, emu::kStream, emu::kStaged}) {
          SCOPED_TRACE("kernel " + std::to_string(kernel));
          std::fill(got.begin(), got.end(), NAN);
          emu::matmul(int(pack_layout(t)), w.packed.data(), rows, nb, got_q.data(), n_tok, got.data(), kernel);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "at " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
}

// Several matrices of one layout times the same activations in one launch
// (a layer's q, k and v): each y the CPU's product of its own matrix, bit
// for bit, by every kernel; 6 matrices go as a launch of 4 and one of 2.
TEST(CudaMatmulEmulated, SeveralMatricesInOneLaunchAreEachTheCpus) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  std::mt19937 rng(3);
  const int cols = 512;
  const int64_t nb = cols / 32;
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const std::vector<int64_t> rows = {37, 16, 5, 40, 21, 3};
    std::vector<Weight> ws;
    std::vector<std::vector<uint8_t>> data;
    for (int64_t r : rows) {
      data.push_back(random_matrix(t, int(r), cols, rng));
      ws.push_back(make_weight(t, int(r), cols, data.back().data()));
    }
    for (int n_tok : {1, 9}) {
      SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + ", " + std::to_string(n_tok) + " tokens");
      const std::vector<float> x = activations(n_tok, cols, rng);
      std::vector<BlockQ8> q(size_t(n_tok) * size_t(nb));
      quantize_q8(x.data(), x.size(), q.data());
      for (int kernel : {emu::kAuto, emu::kTile, emu::kSplit, emu::kStream, emu::kStaged}) {
        SCOPED_TRACE("kernel " + std::to_string(kernel));
        std::vector<std::vector<float>> got;
        std::vector<const uint32_t*> words;
        std::vector<float*> ys;
        for (size_t i = 0; i < ws.size(); ++i) {
          got.emplace_back(size_t(n_tok) * size_t(rows[i]), NAN);
          words.push_back(ws[i].packed.data());
        }
        for (auto& g : got) ys.push_back(g.data());
        emu::matmul_many(int(pack_layout(t)), int(ws.size()), words.data(), rows.data(), nb, q.data(), n_tok,
                         ys.data(), kernel);
        for (size_t i = 0; i < ws.size(); ++i) {
          std::vector<float> want(got[i].size());
          std::vector<BlockQ8> scratch;
          matmul(ws[i], x.data(), n_tok, want.data(), scratch);
          for (size_t j = 0; j < want.size(); ++j)
            ASSERT_EQ(std::memcmp(&got[i][j], &want[j], 4), 0) << "matrix " << i << " at " << j;
        }
      }
    }
  }
}

// Float matrices as the file has them (F32, F16, BF16) times float
// activations: the CPU's matmul of the same matrix (its dots' order)
// bit for bit, rows of any length (a partial last group of 32 columns),
// 1 and 9 tokens (a partial 8-token tile, idle warps in the last block).
TEST(CudaMatmulEmulated, FloatMatricesAsTheCpuDoes) {
  std::mt19937 rng(2);
  std::normal_distribution<float> value(0.0f, 0.5f);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (auto [rows, cols] : {std::pair{37, 100}, std::pair{6, 31}}) {
      std::vector<uint8_t> data(size_t(rows) * size_t(cols) * (t == GgmlType::F32 ? 4 : 2));
      for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) {
        const float v = value(rng);
        if (t == GgmlType::F32) std::memcpy(data.data() + 4 * i, &v, 4);
        else {
          const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
          std::memcpy(data.data() + 2 * i, &h, 2);
        }
      }
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_EQ(w.type, t);
      std::vector<float> values(size_t(rows) * size_t(cols));
      dequantize_row(t, data.data(), values.data(), values.size());
      const int kind = t == GgmlType::F32 ? cuda::kernels::kF32 : t == GgmlType::F16 ? cuda::kernels::kF16
                                                                                       : cuda::kernels::kBF16;
      for (int n_tok : {1, 9}) {
        SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols) + ", " + std::to_string(n_tok) + " tokens");
        std::vector<float> x(size_t(n_tok) * size_t(cols));
        for (float& v : x) v = value(rng);
        std::vector<float> want(size_t(n_tok) * size_t(rows)), got(want.size(), NAN);
        std::vector<BlockQ8> scratch;
        matmul(w, x.data(), n_tok, want.data(), scratch);
        emu::float_matmul(kind, data.data(), rows, cols, x.data(), n_tok, got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "at " << i << ": " << got[i] << " vs " << want[i];
        // And a reference of its own: each dot in double, close.
        for (int tk = 0; tk < n_tok; ++tk)
          for (int r = 0; r < rows; ++r) {
            double s = 0;
            for (int c = 0; c < cols; ++c)
              s += double(values[size_t(r) * size_t(cols) + size_t(c)]) * double(x[size_t(tk) * size_t(cols) + size_t(c)]);
            ASSERT_NEAR(got[size_t(tk) * size_t(rows) + size_t(r)], s, 1e-4 * (1 + std::fabs(s)));
          }
      }
    }
}

}  // namespace
}  // namespace cs
