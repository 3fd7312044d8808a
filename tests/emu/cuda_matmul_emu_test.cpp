// model/cuda_matmul_kernels.cu run by the CPU emulator (tests/emu/cuda_emu.h:
// a thread per lane, the m16n8k32 mma from PTX's fragment layout) against
// the CPU's quantize_q8 and matmul, bit for bit: every layout, a partial
// 16-row group, 1 to 20 tokens (partial 8-token tiles, idle warps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
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
    for (auto [rows, cols] : {std::pair{37, 256}, std::pair{64, 512}}) {
      const std::vector<uint8_t> data = random_matrix(t, rows, cols, rng);
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_FALSE(w.packed.empty());
      const int64_t nb = cols / 32;
      for (int n_tok : {1, 9, 20}) {
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
        emu::matmul(int(pack_layout(t)), w.packed.data(), rows, nb, got_q.data(), n_tok, got.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "at " << i << ": " << got[i] << " vs " << want[i];
      }
    }
}

}  // namespace
}  // namespace cs
