#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>

#include "base/cpu.h"
#include "base/f16.h"
#include "model/ggml_types.h"
#include "model/matmul.h"
#include "omp_threads.h"

namespace cs {
namespace {

TEST(F16, KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);               // overflow -> inf
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);      // smallest subnormal
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); // tie rounds to even
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604644775390625e-8f);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(F16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h);
  }
}

TEST(Dequantize, Q4_0HandComputed) {
  BlockQ4_0 b{};
  b.d = f32_to_f16(0.5f);
  b.qs[0] = 0x3a;  // element 0 = 0xa - 8 = 2, element 16 = 0x3 - 8 = -5
  b.qs[15] = 0xf0; // element 15 = -8, element 31 = 7
  float out[32];
  dequantize_row(GgmlType::Q4_0, &b, out, 32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[16], -2.5f);
  EXPECT_EQ(out[15], -4.0f);
  EXPECT_EQ(out[31], 3.5f);
  EXPECT_EQ(out[1], -4.0f);  // nibble 0 -> -8 * 0.5
}

TEST(Dequantize, Q4_1HandComputed) {
  BlockQ4_1 b{};
  b.d = f32_to_f16(0.25f);
  b.m = f32_to_f16(-1.0f);
  b.qs[3] = 0x51;  // element 3 = 1 * 0.25 - 1, element 19 = 5 * 0.25 - 1
  float out[32];
  dequantize_row(GgmlType::Q4_1, &b, out, 32);
  EXPECT_EQ(out[3], -0.75f);
  EXPECT_EQ(out[19], 0.25f);
  EXPECT_EQ(out[0], -1.0f);
}

TEST(Dequantize, Q8_0AndFloats) {
  BlockQ8_0 b{};
  b.d = f32_to_f16(0.125f);
  b.qs[0] = -128;
  b.qs[31] = 100;
  float out[32];
  dequantize_row(GgmlType::Q8_0, &b, out, 32);
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[31], 12.5f);
  uint16_t h[2] = {f32_to_f16(1.5f), f32_to_bf16(-2.0f)};
  dequantize_row(GgmlType::F16, h, out, 1);
  EXPECT_EQ(out[0], 1.5f);
  dequantize_row(GgmlType::BF16, h + 1, out, 1);
  EXPECT_EQ(out[0], -2.0f);
}

TEST(QuantizeQ8, ScaleAndSum) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16) / 4;  // amax 4
  BlockQ8 b;
  quantize_q8(x, 32, &b);
  EXPECT_FLOAT_EQ(b.d, f16_to_f32(f32_to_f16(4.0f / 127)));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += b.qs[i];
  EXPECT_NEAR(b.s, b.d * sum, 0.01);
}

// The vector quantizer is bit for bit the scalar formula (llama.cpp's
// quantize_row_q8_0 scale and rounding): random blocks over many magnitudes,
// an all-zero block, and exact halves that must round to even.
TEST(QuantizeQ8, MatchesScalarFormulaBitForBit) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> expo(-20, 20);
  const int nb = 200;
  std::vector<float> x(size_t(nb) * 32);
  for (int b = 0; b < nb; ++b) {
    const float scale = std::ldexp(1.0f, expo(rng));
    for (int j = 0; j < 32; ++j) x[size_t(b) * 32 + j] = nd(rng) * scale;
  }
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // block 1: all zero
  for (int j = 0; j < 32; ++j) x[64 + j] = float(j - 16) + 0.5f;  // block 2: halves
  x[64] = 127.0f;  // amax 127: id = 1, so x * id keeps its .5
  std::vector<BlockQ8> got(static_cast<size_t>(nb));
  quantize_q8(x.data(), x.size(), got.data());
  for (int b = 0; b < nb; ++b) {
    const float* v = x.data() + size_t(b) * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    int sum = 0, sum_lo = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = int(std::nearbyint(v[j] * id));
      ASSERT_EQ(got[size_t(b)].qs[j], q) << "block " << b << " element " << j;
      sum += q;
      if (j < 16) sum_lo += q;
    }
    EXPECT_EQ(got[size_t(b)].sum, sum) << "block " << b;
    EXPECT_EQ(got[size_t(b)].sum_lo, sum_lo) << "block " << b;
    EXPECT_EQ(got[size_t(b)].d, f16_to_f32(f32_to_f16(d))) << "block " << b;
    EXPECT_EQ(got[size_t(b)].s, f16_to_f32(f32_to_f16(d * float(sum)))) << "block " << b;
    EXPECT_EQ(got[size_t(b)].ds, f16_to_f32(f32_to_f16(d)) * float(sum)) << "block " << b;
  }
  EXPECT_EQ(got[2].qs[1], -14);  // -14.5 -> -14 (even)
  EXPECT_EQ(got[2].qs[3], -12);  // -12.5 -> -12
  EXPECT_EQ(got[2].qs[19], 4);   // 3.5 -> 4
  EXPECT_EQ(got[1].d, 0.0f);
}

std::vector<uint8_t> random_rows(GgmlType t, int rows, int cols, std::mt19937& rng) {
  const TypeInfo info = *type_info(uint32_t(t));
  std::vector<uint8_t> data(size_t(rows) * cols / info.block_elems * info.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (auto& v : data) v = uint8_t(byte(rng));
  // Keep the fp16 scales finite and realistic: d (and the minimum's
  // scale, which follows it) where each block keeps them.
  const size_t d_at = t == GgmlType::Q2_K   ? offsetof(BlockQ2_K, d)
                      : t == GgmlType::Q3_K ? offsetof(BlockQ3_K, d)
                      : t == GgmlType::Q6_K ? offsetof(BlockQ6_K, d)
                                            : 0;
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K ||
                       t == GgmlType::Q5_K || t == GgmlType::Q2_K;
  for (size_t off = 0; off < data.size(); off += size_t(info.block_bytes)) {
    if (t == GgmlType::MXFP4) {  // an E8M0 exponent: scales 2^-8 .. 2^-2
      data[off] = uint8_t(120 + byte(rng) % 7);
      continue;
    }
    uint16_t d = f32_to_f16(scale(rng)), m = f32_to_f16(-scale(rng) * 8);
    std::memcpy(&data[off + d_at], &d, 2);
    if (has_min) std::memcpy(&data[off + d_at + 2], &m, 2);
  }
  return data;
}

// n values drawn from N(0, 1): activations for the kernels.
std::vector<float> normal_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

// Every ISA's kernel equals the float product of the dequantized weights with
// the dequantized activations (the exact math it implements), for each type
// and token count.
TEST(QDot, EveryIsaMatchesDequantizedReference) {
  std::mt19937 rng(7);
  const int rows = 37, cols = 256, nb = cols / 32;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    const auto w = random_rows(t, rows, cols, rng);
    const size_t rb = w.size() / rows;
    for (int n_tok : {1, 2, 3, 4, 5, 9}) {
      std::vector<float> x = normal_values(size_t(n_tok) * cols, rng);
      std::vector<BlockQ8> acts(size_t(n_tok) * nb);
      for (int k = 0; k < n_tok; ++k) quantize_q8(&x[size_t(k) * cols], cols, &acts[size_t(k) * nb]);
      // Reference: float dot of dequantized rows and dequantized activations.
      std::vector<float> ref(size_t(n_tok) * rows), wr(cols);
      for (int r = 0; r < rows; ++r) {
        dequantize_row(t, &w[r * rb], wr.data(), cols);
        for (int k = 0; k < n_tok; ++k) {
          // Q4 kernels add the block minimum m times the stored activation sum
          // s (fp16-rounded, as llama.cpp does), so the reference does too.
          double s = 0;
          for (int b = 0; b < nb; ++b) {
            const BlockQ8& a = acts[size_t(k) * nb + b];
            const uint8_t* blk = &w[r * rb + size_t(b) * type_info(uint32_t(t))->block_bytes];
            uint16_t dh, mh;
            std::memcpy(&dh, blk, 2);
            std::memcpy(&mh, blk + 2, 2);
            const double m = t == GgmlType::Q4_1 ? f16_to_f32(mh)
                             : t == GgmlType::Q4_0 ? -8.0 * f16_to_f32(dh) : 0.0;
            for (int j = 0; j < 32; ++j) s += (double(wr[b * 32 + j]) - m) * a.d * a.qs[j];
            s += m * a.s;
          }
          ref[size_t(k) * rows + r] = float(s);
        }
      }
      const QDotKernel kernels[] = {qdot_scalar, qdot_avx2, qdot_avx512};
      for (int isa = 0; isa <= int(cpu_isa()); ++isa) {
        std::vector<float> y(ref.size());
        kernels[isa](t, w.data(), rb, rows, acts.data(), nb, n_tok, y.data(), rows);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], ref[i], 1e-4 + 1e-4 * std::fabs(ref[i]))
              << type_info(uint32_t(t))->name << " isa " << isa << " n_tok " << n_tok << " i " << i;
      }
    }
  }
}

// Every quantized type repacked (all but Q4_0/Q4_1/Q8_0 exist only
// repacked): block32's integers and affine maps give dequantize_row's values
// bit for bit (so the repacking is exact), and every ISA's matmul equals the
// product of the dequantized weights with the dequantized activations, the
// minimums weighted as each layout does (s per block, or d * sum);
// AVX2 and AVX-512 agree bit for bit.
TEST(Matmul, RepackedTypesAreExactOnEveryIsa) {
  std::mt19937 rng(41);
  const Isa best = cpu_isa();
  // 37 rows end in a group of 5 (one 8-row half), 45 in one of 13 (the
  // second half partial).
  for (int rows : {37, 45})
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q5_1,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                     GgmlType::IQ4_XS, GgmlType::MXFP4}) {
    const int cols = 512, nb = cols / 32;
    const PackLayout layout = pack_layout(t);
    EXPECT_TRUE(t == GgmlType::Q4_1 || t == GgmlType::Q8_0 || only_repacked(t));
    const auto data = random_rows(t, rows, cols, rng);
    const size_t rb = data.size() / rows;
    std::vector<float> deq(cols);
    for (int r = 0; r < rows; ++r) {
      dequantize_row(t, &data[r * rb], deq.data(), cols);
      for (int b = 0; b < nb; ++b) {
        const Block32 blk = block32(t, &data[r * rb], b);
        for (int j = 0; j < 32; ++j) {
          volatile float p = blk.d[j / 16] * float(blk.q[j]);  // two roundings, as the dequantizer's
          ASSERT_EQ(p + blk.m[j / 16], deq[size_t(b * 32 + j)])
              << type_info(uint32_t(t))->name << " row " << r << " block " << b << " value " << j;
        }
      }
    }
    const Weight w = make_weight(t, rows, cols, data.data());
    ASSERT_FALSE(w.packed.empty());
    if (is_k_layout(layout)) {
      // The K layouts keep the file's factors: each map is d * sc (and
      // dmin * mn), exact; 4.75, 5.75 and 6.625 bits per value.
      for (int r = 0; r < rows; ++r)
        for (int b = 0; b < nb; ++b) {
          const Block32 blk = block32(t, &data[r * rb], b);
          const BlockScales bs = block_scales(t, &data[r * rb], b);
          for (int h = 0; h < 2; ++h) {
            ASSERT_EQ(bs.d * float(bs.sc[h]), blk.d[h]) << type_info(uint32_t(t))->name << " row " << r << " block " << b;
            ASSERT_EQ(bs.dmin * float(bs.mn[h]), blk.m[h]) << type_info(uint32_t(t))->name << " row " << r << " block " << b;
          }
        }
      const size_t bits = t == GgmlType::Q4_K ? 4750 : t == GgmlType::Q5_K ? 5750 : 6625;
      EXPECT_EQ(w.packed.size() * 32 * 1000, bits * 48 * cols) << type_info(uint32_t(t))->name;  // 37 or 45 rows -> 3 groups of 16
    }
    // MXFP4 keeps the file's bytes: 4.25 bits per value; IQ4_NL and IQ4_XS
    // 5 (a nibble code and an fp32 scale per 32 values).
    if (layout == PackLayout::kMx) {
      EXPECT_EQ(w.packed.size() * 32 * 100, size_t(425) * 48 * cols);
    }
    if (layout == PackLayout::kIq4) {
      EXPECT_EQ(w.packed.size() * 32, size_t(5) * 48 * cols) << type_info(uint32_t(t))->name;
    }
    for (int n_tok : {1, 2, 3, 4, 6, 9}) {
      std::vector<float> x = normal_values(size_t(n_tok) * cols, rng);
      std::vector<BlockQ8> acts(size_t(n_tok) * nb);
      for (int k = 0; k < n_tok; ++k) quantize_q8(&x[size_t(k) * cols], cols, &acts[size_t(k) * nb]);
      std::vector<double> ref(size_t(n_tok) * rows);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < n_tok; ++k) {
          double s = 0;
          for (int b = 0; b < nb; ++b) {
            const Block32 blk = block32(t, &data[r * rb], b);
            const BlockQ8& a = acts[size_t(k) * nb + b];
            for (int j = 0; j < 32; ++j) s += double(blk.d[j / 16]) * blk.q[j] * a.d * a.qs[j];
            // The minimums times the activations' sum: the stored s in the Q4
            // layout, d * sum of the block or of each half in the Q8 ones.
            if (layout == PackLayout::kQ4)
              s += double(blk.m[0]) * a.s;
            else
              s += double(blk.m[0]) * a.d * a.sum_lo + double(blk.m[1]) * a.d * (a.sum - a.sum_lo);
          }
          ref[size_t(k) * rows + r] = s;
        }
      std::vector<float> first;
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
        if (isa > best) continue;
        set_isa_for_testing(isa);
        std::vector<BlockQ8> scratch;
        std::vector<float> y(ref.size(), NAN);
        matmul(w, x.data(), n_tok, y.data(), scratch);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], ref[i], 1e-4 + 1e-4 * std::fabs(ref[i]))
              << type_info(uint32_t(t))->name << " " << isa_name(isa) << " n_tok " << n_tok << " i " << i;
        // Each token's outputs are the bits it gets alone: a row's sums do
        // not depend on the other tokens of the call (the AVX2 kernels run
        // one or two tokens with both halves of a group at once, more a
        // half at a time).
        for (int k = 0; k < n_tok && n_tok > 1; ++k) {
          std::vector<float> alone(static_cast<size_t>(rows));
          matmul(w, &x[size_t(k) * cols], 1, alone.data(), scratch);
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(alone[size_t(r)], y[size_t(k) * rows + size_t(r)])
                << type_info(uint32_t(t))->name << " " << isa_name(isa) << " n_tok " << n_tok << " token " << k;
        }
        if (isa == Isa::kScalar) continue;
        if (first.empty()) first = y;
        else EXPECT_EQ(first, y) << "AVX2 and AVX-512 differ";
      }
      set_isa_for_testing(best);
    }
  }
}

// MXFP4's scales are built in the kernels from the exponent bytes: every
// exponent from the subnormal ones (0, 1) up gives dequantize_row's scale,
// so every ISA's product is the double product of the dequantized values
// (to fp32 accumulation), AVX2 and AVX-512 bit for bit.
TEST(Matmul, MxScalesOfEveryExponent) {
  std::mt19937 rng(43);
  const int rows = 19, cols = 32 * 16, nb = cols / 32;
  std::vector<uint8_t> data(size_t(rows) * nb * sizeof(BlockMXFP4));
  for (auto& v : data) v = uint8_t(rng());
  const uint8_t exps[] = {0, 1, 2, 3, 64, 100, 126, 127, 128, 129, 140, 160, 180, 190, 1, 0};
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < nb; ++b) data[(size_t(r) * nb + b) * sizeof(BlockMXFP4)] = exps[(r + b) % 16];
  const Weight w = make_weight(GgmlType::MXFP4, rows, cols, data.data());
  std::vector<float> x = normal_values(size_t(2) * cols, rng);
  std::vector<BlockQ8> acts(size_t(2) * nb);
  for (int k = 0; k < 2; ++k) quantize_q8(&x[size_t(k) * cols], cols, &acts[size_t(k) * nb]);
  const size_t rb = data.size() / rows;
  std::vector<float> first;
  // The CPU's best, read before the loop sets another (read in the loop, it
  // was the scalar kernel's after the first pass: only that one was tested,
  // and every later test in the suite ran on it).
  const Isa best = cpu_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > best) continue;
    set_isa_for_testing(isa);
    std::vector<BlockQ8> scratch;
    std::vector<float> y(size_t(2) * rows, NAN);
    matmul(w, x.data(), 2, y.data(), scratch);
    std::vector<float> deq(cols);
    for (int r = 0; r < rows; ++r) {
      dequantize_row(GgmlType::MXFP4, &data[r * rb], deq.data(), cols);
      for (int k = 0; k < 2; ++k) {
        double s = 0;
        for (int i = 0; i < cols; ++i) s += double(deq[size_t(i)]) * acts[size_t(k) * nb + i / 32].d * acts[size_t(k) * nb + i / 32].qs[i % 32];
        ASSERT_NEAR(y[size_t(k) * rows + r], s, 1e-5 * std::fabs(s) + 1e-30) << isa_name(isa) << " row " << r;
      }
    }
    if (isa == Isa::kScalar) continue;
    if (first.empty()) first = y;
    else EXPECT_EQ(first, y) << "AVX2 and AVX-512 differ";
  }
  set_isa_for_testing(best);
}

TEST(Matmul, FloatWeightsKeepTheFilesValuesAndAreExact) {
  const int rows = 3, cols = 4;
  std::vector<uint16_t> h(rows * cols);
  for (int i = 0; i < rows * cols; ++i) h[i] = f32_to_f16(float(i));
  Weight w = make_weight(GgmlType::F16, rows, cols, reinterpret_cast<const uint8_t*>(h.data()));
  EXPECT_EQ(w.type, GgmlType::F16);  // 2 bytes a value, as the file has them
  EXPECT_EQ(w.row_bytes, size_t(cols) * 2);
  EXPECT_EQ(w.owned.size(), h.size() * 2);
  const float x[cols] = {1, 0, -1, 2};
  float y[rows];
  std::vector<BlockQ8> scratch;
  matmul(w, x, 1, y, scratch);
  EXPECT_EQ(y[0], 0 - 2 + 6);
  EXPECT_EQ(y[1], 4 - 6 + 14);
  EXPECT_EQ(y[2], 8 - 10 + 22);
}

// The float matmul's one order (model/matmul.cpp; the GPU's float matmul
// repeats it), written plainly: 32 lanes of fma over columns j, j + 32, ...,
// then the halves 16, 8, 4, 2, 1.
float lanes_reference(const float* w, const float* x, int n) {
  float acc[32] = {};
  for (int c = 0; c < n; ++c) acc[c % 32] = std::fma(w[c], x[c], acc[c % 32]);
  for (int h = 16; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
  return acc[0];
}

// F32, F16 and BF16 matrices give that order's bits for every row and token
// (widths with and without a partial group of 32 columns, token counts odd
// and even; 8192 columns take 4 tokens a tile: 9 tokens are 3 tiles), and a 16-bit file's values give
// the same bits as the same values in an F32 file.
TEST(Matmul, FloatWeightsSumInTheLanesOrderWhateverTheTypeAndTokens) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
    for (int cols : {32, 100, 576, 8192})
      for (int n_tok : {1, 2, 3, 8, 9}) {
        const int rows = 19;
        SCOPED_TRACE(std::string(type_info(uint32_t(t))->name) + " cols " + std::to_string(cols) + " tokens " +
                     std::to_string(n_tok));
        std::vector<float> values(size_t(rows) * cols), x(size_t(n_tok) * cols);
        std::vector<uint8_t> file(values.size() * (t == GgmlType::F32 ? 4 : 2));
        for (size_t i = 0; i < values.size(); ++i) {
          float v = nd(rng);
          if (i % 97 == 5) v = 0.0f;
          if (t == GgmlType::F32) {
            std::memcpy(file.data() + 4 * i, &v, 4);
          } else {
            const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
            std::memcpy(file.data() + 2 * i, &h, 2);
            v = t == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          }
          values[i] = v;
        }
        for (auto& v : x) v = nd(rng);
        std::vector<float> y(size_t(n_tok) * rows), y32(y.size());
        std::vector<BlockQ8> scratch;
        matmul(make_weight(t, rows, cols, file.data()), x.data(), n_tok, y.data(), scratch);
        matmul(make_weight(GgmlType::F32, rows, cols, reinterpret_cast<const uint8_t*>(values.data())), x.data(),
               n_tok, y32.data(), scratch);
        for (int tok = 0; tok < n_tok; ++tok)
          for (int r = 0; r < rows; ++r) {
            const float want = lanes_reference(values.data() + size_t(r) * cols, x.data() + size_t(tok) * cols, cols);
            const size_t i = size_t(tok) * rows + size_t(r);
            ASSERT_EQ(std::memcmp(&y[i], &want, 4), 0) << "token " << tok << " row " << r << ": " << y[i] << " vs " << want;
            ASSERT_EQ(std::memcmp(&y32[i], &want, 4), 0) << "as F32, token " << tok << " row " << r;
          }
      }
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// matmul_multi is the same as one matmul per weight: quantized and float
// weights mixed, more weights than one tile table holds, several token counts.
TEST(Matmul, MultiEqualsSeparateProducts) {
  std::mt19937 rng(9);
  const int cols = 64;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<uint16_t>> f16s;
  std::vector<Weight> ws;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0};
  for (int i = 0; i < 9; ++i) {
    const int rows = 5 + 7 * i;
    data.push_back(random_rows(types[i % 3], rows, cols, rng));
    ws.push_back(make_weight(types[i % 3], rows, cols, data.back().data()));
  }
  f16s.emplace_back(size_t(3 * cols), f32_to_f16(0.5f));
  ws.push_back(make_weight(GgmlType::F16, 3, cols, reinterpret_cast<const uint8_t*>(f16s[0].data())));
  for (int n_tok : {1, 6}) {
    std::vector<float> x = normal_values(size_t(n_tok) * cols, rng);
    std::vector<std::vector<float>> want(ws.size()), got(ws.size());
    std::vector<const Weight*> wp;
    std::vector<float*> yp;
    std::vector<BlockQ8> scratch;
    for (size_t i = 0; i < ws.size(); ++i) {
      want[i].resize(size_t(n_tok) * ws[i].rows);
      got[i].resize(want[i].size());
      matmul(ws[i], x.data(), n_tok, want[i].data(), scratch);
      wp.push_back(&ws[i]);
      yp.push_back(got[i].data());
    }
    matmul_multi(wp, x.data(), n_tok, yp, scratch);
    for (size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(got[i], want[i]) << "weight " << i;
    // Only the quantized ones, in one region.
    matmul_multi(std::span(wp).first(3), x.data(), n_tok, std::span(yp).first(3), scratch);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << "weight " << i;
  }
}

// matmul_grouped is one matmul per weight on its own input, bit for bit:
// K-quant and legacy types, inputs of 1 to 70 rows (two token tiles), entries
// sharing an input (gate and up), and a float weight (each as matmul()).
TEST(Matmul, GroupedEqualsSeparateProducts) {
  std::mt19937 rng(11);
  const int cols = 256;
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q5_K, GgmlType::Q4_0};
  std::vector<std::vector<uint8_t>> data;
  std::vector<Weight> ws;
  for (int i = 0; i < 10; ++i) {
    const int rows = 3 + 11 * i;
    data.push_back(random_rows(types[i % 5], rows, cols, rng));
    ws.push_back(make_weight(types[i % 5], rows, cols, data.back().data()));
  }
  const int n_tok[] = {1, 70, 2, 2, 5, 1, 3, 17, 1, 4};
  std::vector<std::vector<float>> xs(10);
  for (int i = 0; i < 10; ++i) xs[size_t(i)] = normal_values(size_t(n_tok[i]) * cols, rng);
  xs[3] = xs[2];  // a shared input, as gate and up have
  for (bool with_float : {false, true}) {
    std::vector<uint16_t> f16(size_t(9) * cols, f32_to_f16(0.25f));
    Weight fw = make_weight(GgmlType::F16, 9, cols, reinterpret_cast<const uint8_t*>(f16.data()));
    std::vector<const Weight*> wp;
    std::vector<const float*> xp;
    std::vector<int> np;
    std::vector<std::vector<float>> want, got;
    std::vector<BlockQ8> scratch;
    for (int i = 0; i < 10; ++i) {
      const Weight& w = with_float && i == 4 ? fw : ws[size_t(i)];
      wp.push_back(&w);
      xp.push_back(i == 3 ? xp[2] : xs[size_t(i)].data());
      np.push_back(n_tok[i]);
      want.emplace_back(size_t(n_tok[i]) * size_t(w.rows));
      matmul(w, xp.back(), n_tok[i], want.back().data(), scratch);
      got.emplace_back(want.back().size(), -1.0f);
    }
    std::vector<float*> yp;
    for (auto& g : got) yp.push_back(g.data());
    matmul_grouped(wp, xp, np, yp, scratch);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "entry " << i << (with_float ? " (with a float weight)" : "");
  }
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// The repacked 16-row kernels (AVX2, and AVX-512 where the CPU has it)
// compute the same products as the scalar kernel on the file's layout (rows
// not a multiple of 16 or of 8 included), and give each other's bits.
TEST(Matmul, RepackedEqualsScalar) {
  const Isa best = cpu_isa();
  if (best < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(21);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0})
    for (int rows : {37, 16, 5}) {
      const int cols = 256;
      const auto data = random_rows(t, rows, cols, rng);
      const Weight w = make_weight(t, rows, cols, data.data());
      ASSERT_FALSE(w.packed.empty());
      for (int n_tok : {1, 3, 4, 6, 9}) {
        std::vector<float> x = normal_values(size_t(n_tok) * cols, rng);
        std::vector<BlockQ8> scratch;
        std::vector<float> slow(size_t(n_tok) * rows), first;
        set_isa_for_testing(Isa::kScalar);
        matmul(w, x.data(), n_tok, slow.data(), scratch);
        for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
          if (isa > best) continue;
          set_isa_for_testing(isa);
          std::vector<float> fast(slow.size(), NAN);
          matmul(w, x.data(), n_tok, fast.data(), scratch);
          for (size_t i = 0; i < fast.size(); ++i)
            ASSERT_NEAR(fast[i], slow[i], 1e-4 + 1e-4 * std::fabs(slow[i]))
                << type_info(uint32_t(t))->name << " " << isa_name(isa) << " rows " << rows << " i " << i;
          if (first.empty()) first = fast;
          else EXPECT_EQ(first, fast) << "AVX2 and AVX-512 repacked kernels differ";
        }
        set_isa_for_testing(best);
      }
    }
}

// A row's product does not depend on how many rows share the call: the
// kernels tile the tokens (evenly, up to 8 at a time) and each token keeps
// its own sums. Speculative decoding relies on it (a draft's rows run beside
// the sequence's next token and must give the bits that row alone would).
TEST(Matmul, EachRowHasItsOwnBitsWhateverTheTokenCount) {
  std::mt19937 rng(43);
  const Isa best = cpu_isa();
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q3_K, GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    const int rows = 21, cols = 256;
    const auto data = random_rows(t, rows, cols, rng);
    const Weight w = make_weight(t, rows, cols, data.data());
    const int most = 19;
    const std::vector<float> x = normal_values(size_t(most) * cols, rng);
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > best) continue;
      set_isa_for_testing(isa);
      std::vector<BlockQ8> scratch;
      std::vector<float> alone(size_t(most) * rows);
      for (int k = 0; k < most; ++k)
        matmul(w, &x[size_t(k) * cols], 1, &alone[size_t(k) * rows], scratch);
      for (int n_tok = 2; n_tok <= most; ++n_tok) {
        std::vector<float> y(size_t(n_tok) * rows, NAN);
        matmul(w, x.data(), n_tok, y.data(), scratch);
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], alone[i]) << type_info(uint32_t(t))->name << " " << isa_name(isa) << " n_tok " << n_tok
                                    << " row " << i / rows;
      }
    }
    set_isa_for_testing(best);
  }
}

// The AVX2 kernel adds vpmaddubsw pairs in 16 bits: the extreme block (every
// nibble 15, or every Q8_0 weight -128, against activations all +-127) must
// not saturate.
TEST(Matmul, RepackedExtremesDoNotSaturate) {
  const Isa best = cpu_isa();
  if (best < Isa::kAvx2) GTEST_SKIP() << "no AVX2";
  // The bytes of each block that hold values: all bits set gives the
  // largest value (Q8_0: 0x80, the most negative); the K layouts' values
  // reach 63 (Q6_K), whose vpmaddubsw pairs come closest to 2^15.
  struct Values {
    GgmlType type;
    int begin, end;
    uint8_t byte;
  };
  for (Values v : {Values{GgmlType::Q4_0, 2, 18, 0xff}, Values{GgmlType::Q4_1, 4, 20, 0xff},
                   Values{GgmlType::Q8_0, 2, 34, 0x80}, Values{GgmlType::Q4_K, 16, 144, 0xff},
                   Values{GgmlType::Q5_K, 16, 176, 0xff}, Values{GgmlType::Q6_K, 0, 192, 0xff}}) {
    const GgmlType t = v.type;
    const int rows = 16, cols = 256;
    std::mt19937 rng(3);
    auto data = random_rows(t, rows, cols, rng);
    const int bs = int(type_info(uint32_t(t))->block_bytes);
    for (size_t off = 0; off < data.size(); off += size_t(bs))
      for (int i = v.begin; i < v.end; ++i) data[off + size_t(i)] = v.byte;
    const Weight w = make_weight(t, rows, cols, data.data());
    for (float sign : {1.0f, -1.0f}) {
      const std::vector<float> x(cols, 0.5f * sign);
      std::vector<BlockQ8> scratch;
      std::vector<float> fast(rows), slow(rows);
      set_isa_for_testing(Isa::kScalar);
      matmul(w, x.data(), 1, slow.data(), scratch);
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (isa > best) continue;
        set_isa_for_testing(isa);
        matmul(w, x.data(), 1, fast.data(), scratch);
        for (int r = 0; r < rows; ++r)
          ASSERT_NEAR(fast[size_t(r)], slow[size_t(r)], 1e-4 + 1e-4 * std::fabs(slow[size_t(r)]))
              << type_info(uint32_t(t))->name << " " << isa_name(isa);
      }
      set_isa_for_testing(best);
    }
  }
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// The refined head against the exact product of the dequantized weights with
// the float activations (double sums), on activations with outliers (what
// makes an 8-bit block coarse): where it refines, its error is a small
// fraction of matmul()'s; where it does not, it is matmul()'s, bit for bit;
// and a row's result does not depend on the rows beside it.
TEST(Matmul, RefinedHeadIsCloserToTheExactProduct) {
  std::mt19937 rng(31);
  const Isa best = cpu_isa();
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q2_K})
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (isa > best) continue;
      set_isa_for_testing(isa);
      const int rows = 75, cols = 256, n_tok = 5;  // rows: 4 full tiles and a partial one
      const auto data = random_rows(t, rows, cols, rng);
      const Weight w = make_weight(t, rows, cols, data.data());
      std::vector<float> x(size_t(n_tok) * cols), wf(size_t(rows) * cols);
      std::normal_distribution<float> nd;
      for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 29 == 0 ? 40.0f : 1.0f);
      dequantize_row(t, data.data(), wf.data(), wf.size());
      std::vector<double> exact(size_t(n_tok) * rows);
      for (int k = 0; k < n_tok; ++k)
        for (int r = 0; r < rows; ++r) {
          double s = 0;
          for (int c = 0; c < cols; ++c) s += double(wf[size_t(r) * cols + c]) * x[size_t(k) * cols + c];
          exact[size_t(k) * rows + r] = s;
        }
      std::vector<BlockQ8> scratch;
      HeadScratch head;
      std::vector<float> plain(exact.size()), all(exact.size()), top(exact.size()), alone(rows);
      matmul(w, x.data(), n_tok, plain.data(), scratch);
      matmul_refined(w, x.data(), n_tok, INFINITY, all.data(), head);
      double err_plain = 0, err_all = 0;
      for (size_t i = 0; i < exact.size(); ++i) {
        err_plain = std::max(err_plain, std::fabs(plain[i] - exact[i]));
        err_all = std::max(err_all, std::fabs(all[i] - exact[i]));
      }
      const char* name = type_info(uint32_t(t))->name;
      EXPECT_GT(err_plain, 0.01) << name;  // the outliers do make level one coarse
      EXPECT_LT(err_all, err_plain / 50) << name << " " << isa_name(isa);
      // Margin 0: only the tile holding each row's largest output is refined.
      matmul_refined(w, x.data(), n_tok, 0.0f, top.data(), head);
      for (int k = 0; k < n_tok; ++k) {
        const float* p = plain.data() + size_t(k) * rows;
        const int best_tile = int(std::max_element(p, p + rows) - p) / kPackRows;
        for (int r = 0; r < rows; ++r) {
          const size_t i = size_t(k) * rows + r;
          if (r / kPackRows == best_tile) EXPECT_EQ(top[i], all[i]) << name << " row " << k << " out " << r;
          else EXPECT_EQ(top[i], plain[i]) << name << " row " << k << " out " << r;
        }
        matmul_refined(w, x.data() + size_t(k) * cols, 1, INFINITY, alone.data(), head);
        for (int r = 0; r < rows; ++r) EXPECT_EQ(alone[r], all[size_t(k) * rows + r]) << name << " row " << k;
      }
    }
  set_isa_for_testing(best);
}

// Up to kStackedRows rows, matmul_refined computes a tile's level two in the
// same pass where its level one comes near the running top, and adds it where
// the final top says (see refine_few_rows): each row's result must be the
// many-rows path's (level one everywhere, level two on the tiles selected
// after it), bit for bit, at any margin and thread count. On one thread, at
// margin 0, it computes a row's level two exactly on the tiles that reach a
// new running top and on the tile after each (both levels in one call there).
TEST(Matmul, RefinedHeadOfFewRowsIsTheManyRowsPathsBitForBit) {
  SavedOmpThreads saved;
  std::mt19937 rng(47);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int rows = 1000, cols = 512, n_all = kStackedRows + 1;  // 63 tiles, the last partial
    const auto data = random_rows(t, rows, cols, rng);
    const Weight w = make_weight(t, rows, cols, data.data());
    std::vector<float> x(size_t(n_all) * cols);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 37 == 0 ? 30.0f : 1.0f);
    std::vector<BlockQ8> scratch;
    std::vector<float> plain(size_t(n_all) * rows);
    matmul(w, x.data(), n_all, plain.data(), scratch);
    const auto [lo, hi] = std::minmax_element(plain.begin(), plain.begin() + rows);
    const float spread = *hi - *lo;
    const char* name = type_info(uint32_t(t))->name;
    for (const float margin : {0.0f, 0.05f * spread, 0.3f * spread, INFINITY}) {
      HeadScratch head;
      std::vector<float> many(plain.size()), few(plain.size());
      matmul_refined(w, x.data(), n_all, margin, many.data(), head);  // more than kStackedRows: the other path
      for (int threads : {1, 2})
        for (int n = 1; n <= kStackedRows; ++n)
          for (int first = 0; first + n <= n_all; first += n) {
            omp_set_num_threads(threads);
            matmul_refined(w, x.data() + size_t(first) * cols, n, margin, few.data(), head);
            EXPECT_EQ(std::memcmp(few.data(), many.data() + size_t(first) * rows, size_t(n) * rows * sizeof(float)), 0)
                << name << " margin " << margin << ", " << threads << " threads, rows " << first << " to " << first + n;
            EXPECT_GE(head.level2_pairs, n);  // each row's first tile at least
            EXPECT_LE(head.level2_pairs, n * ((rows + kPackRows - 1) / kPackRows));
          }
    }
    // One thread, one row, margin 0: the tiles in order, refined where level
    // one's maximum reaches the largest before it.
    omp_set_num_threads(1);
    HeadScratch head;
    std::vector<float> y(rows);
    matmul_refined(w, x.data(), 1, 0.0f, y.data(), head);
    int64_t computed = 0;
    float running = -INFINITY;
    bool after_record = false;  // the tile after a record runs both levels in one call
    for (int r0 = 0; r0 < rows; r0 += kPackRows) {
      const float mx = *std::max_element(plain.begin() + r0, plain.begin() + std::min(rows, r0 + kPackRows));
      const bool record = mx >= running;
      if (record) running = mx;
      computed += record || after_record;
      after_record = record;
    }
    EXPECT_EQ(head.level2_pairs, computed) << name;
  }
}

}  // namespace
}  // namespace cs
