// model/cuda_ops_kernels.cu run by the CPU emulator (tests/emu/cuda_emu.h;
// scripts/emulate_cu.py rewrites its launches) against the CPU's operations,
// bit for bit: the kernels' indexing, lanes and branches checked on every
// machine, GPU or not (the GPU's own run: tests/cuda_ops_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "cuda_helpers.h"
#include "model/cpu_ops.h"
#include "model/matmul.h"
#include "cuda_ops_kernels_emu.inc"

namespace cs {
namespace {

namespace emu = cuda::ops_emu;

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

// The blocks a step quantized as it wrote `written` are quantize_q8's of
// it: every block of finite values (a NaN or an infinity makes the CPU's
// vector maximum and the device's fmaxf part, as with the matmul's own
// quantize kernel, whose steps these are).
void expect_quantized(const std::vector<BlockQ8>& got, const std::vector<float>& written, const std::string& what) {
  std::vector<BlockQ8> want(written.size() / 32);
  quantize_q8(written.data(), written.size(), want.data());
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t compared = 0;
  for (size_t b = 0; b < want.size(); ++b) {
    if (!std::all_of(written.begin() + std::ptrdiff_t(32 * b), written.begin() + std::ptrdiff_t(32 * b + 32),
                     [](float v) { return std::isfinite(v); }))
      continue;
    ASSERT_EQ(std::memcmp(&got[b], &want[b], sizeof(BlockQ8)), 0) << what << ": block " << b;
    ++compared;
  }
  EXPECT_GE(compared + 1, want.size()) << what << ": at most the edge values' block left out";
}

TEST(CudaOpsEmulated, EachStepIsTheCpusBitForBit) {
  const auto cpu = cpu_backend().ops();
  const int n = 5, cols = 576, head = 64;
  std::vector<float> xs = normal(size_t(n) * cols, 1), ys = normal(size_t(n) * cols, 2);
  for (int t = 0; t < n; ++t) xs[size_t(t) * cols + size_t(t * 13 % cols)] *= 4000.0f;
  const std::vector<float> w = normal(cols, 3), b = normal(cols, 4);
  const Tensor hx{nullptr, n, cols};
  auto on = [&](std::vector<float>& v) { return Tensor{v.data(), hx.rows, hx.cols}; };
  {
    std::vector<float> h = xs, d = xs;
    std::vector<BlockQ8> q(size_t(n) * cols / 32);
    cpu->rmsnorm(on(h), w, 1e-5f, on(h));
    emu::rmsnorm(d.data(), n, cols, w.data(), cols, 1e-5f, d.data(), q.data());
    expect_same_bits(d, h, "rmsnorm over rows");
    expect_quantized(q, h, "rmsnorm over rows, quantized");
    h = xs, d = xs;
    cpu->rmsnorm(on(h), std::span(w).first(head), 1e-6f, on(h));
    emu::rmsnorm(d.data(), n, cols, w.data(), head, 1e-6f, d.data(), nullptr);
    expect_same_bits(d, h, "rmsnorm over heads");
    h = xs, d = xs;
    cpu->add_bias(on(h), b);
    emu::add_bias(d.data(), n, cols, b.data());
    expect_same_bits(d, h, "add_bias");
    h = xs, d = xs;
    cpu->scale(on(h), 0.0883883f);
    emu::scale(d.data(), d.size(), 0.0883883f);
    expect_same_bits(d, h, "scale");
    h = xs, d = xs;
    cpu->add(on(h), on(ys));
    emu::add(d.data(), ys.data(), d.size());
    expect_same_bits(d, h, "add");
    for (const int g : {cols, head}) {
      std::vector<float> hx = xs, hy = ys, dx = xs, dy = ys;
      std::vector<BlockQ8> q(size_t(n) * cols / 32);
      cpu->add_rmsnorm(on(hx), on(hy), std::span(w).first(size_t(g)), 1e-5f, on(hy));
      emu::add_rmsnorm(dx.data(), dy.data(), n, cols, w.data(), g, 1e-5f, dy.data(), q.data());
      expect_same_bits(dx, hx, "add_rmsnorm's sums, groups of " + std::to_string(g));
      expect_same_bits(dy, hy, "add_rmsnorm's norm, groups of " + std::to_string(g));
      expect_quantized(q, hy, "add_rmsnorm's norm quantized, groups of " + std::to_string(g));
    }
  }
  std::vector<float> g = normal(size_t(n) * cols, 5, 6.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {0.0f, -0.0f, 1e-40f, -87.5f, 88.7f, -95.0f, -104.0f, 7.0f, -7.0f, 1e4f, -3e38f, nan};
  for (size_t i = 0; i < std::size(edge); ++i) g[i] = edge[i], ys[i + 20] = edge[i];
  for (FfnAct act : {FfnAct::kSilu, FfnAct::kGeluTanh, FfnAct::kSwigluOai}) {
    std::vector<float> h = g, d = g;
    std::vector<BlockQ8> q(g.size() / 32);
    cpu->gated_ffn(act, on(h), on(ys));
    emu::gated(int(act), d.data(), ys.data(), d.size(), q.data());
    expect_same_bits(d, h, "gated_ffn " + std::to_string(int(act)));
    expect_quantized(q, h, "gated_ffn " + std::to_string(int(act)) + ", quantized");
  }
  std::vector<int32_t> pos(n);
  for (int t = 0; t < n; ++t) pos[size_t(t)] = t * 977;
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves})
    for (int rot : {head, head / 2}) {  // every dimension rotated, or the first half (partial rotary)
      RopeParams p;
      p.rot_dim = rot, p.style = style;
      RopeTable table;
      table.build(pos.data(), n, p);
      std::vector<float> h = xs, d = xs;
      cpu->rope(on(h), head, table);
      emu::rope(d.data(), cols, nullptr, 0, n, head, table.cos_.data(), table.sin_.data(), table.half,
                style == RopeStyle::kAdjacent);
      expect_same_bits(d, h, "rope " + std::to_string(rot));
      // Queries and keys in one launch (keys of fewer heads: GQA).
      std::vector<float> hq = xs, hk(ys.begin(), ys.begin() + std::ptrdiff_t(n * 2 * head)), dq = hq, dk = hk;
      cpu->rope_qk(on(hq), Tensor{hk.data(), n, 2 * head}, head, table);
      emu::rope(dq.data(), cols, dk.data(), 2 * head, n, head, table.cos_.data(), table.sin_.data(), table.half,
                style == RopeStyle::kAdjacent);
      expect_same_bits(dq, hq, "rope_qk's queries " + std::to_string(rot));
      expect_same_bits(dk, hk, "rope_qk's keys " + std::to_string(rot));
    }
}

// A mixture's weighed sums: each token's k expert rows in order.
TEST(CudaOpsEmulated, CombineIsTheCpusBitForBit) {
  const auto cpu = cpu_backend().ops();
  const int n = 6, k = 3, cols = 96;
  std::vector<float> src = normal(size_t(n) * k * cols, 21), w = normal(size_t(n) * k, 22);
  src[5] = -0.0f, w[0] = 0.0f;
  std::vector<int> slots(size_t(n) * k);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = int((i * 7) % slots.size());
  std::vector<float> want(size_t(n) * cols), got(want.size(), std::numeric_limits<float>::quiet_NaN());
  cpu->combine(Tensor{src.data(), n * k, cols}, slots, w, k, Tensor{want.data(), n, cols});
  emu::combine(src.data(), cols, slots.data(), w.data(), k, n, got.data());
  expect_same_bits(got, want, "combine");
}

// The refined head's device steps (residual, level-two sums, selection and
// refinement) on level one's and two's products from the CPU's own kernels:
// matmul_refined's logits, through its stacked path (up to 4 rows) and its
// tile-by-tile one.
TEST(CudaOpsEmulated, TheRefinedHeadIsTheCpusBitForBit) {
  const auto cpu = cpu_backend().ops();
  std::mt19937 rng(9);
  const int rows = 1000, cols = 512, nb = cols / 32;  // rows: not a whole number of 16-row tiles
  const Isa isa = cpu_isa();
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K}) {
    const TypeInfo info = *type_info(uint32_t(type));
    const std::vector<uint8_t> data = random_matrix(type, rows, cols, rng);
    const Weight w = make_weight(type, rows, cols, data.data());
    // Without AVX2, Q4_1 and Q8_0 keep the file's layout (no packed words).
    if (w.packed.empty()) continue;
    const PackLayout layout = pack_layout(type);
    const size_t group_words = is_k_layout(layout) ? size_t(k_super_words(layout)) * size_t(cols / 256)
                                                   : size_t(pack_block_words(layout)) * size_t(nb);
    for (int n_tok : {1, 4, 5, 19}) {
      SCOPED_TRACE(std::string(info.name) + ", " + std::to_string(n_tok) + " rows");
      const std::vector<float> x = normal(size_t(n_tok) * cols, 7 + unsigned(n_tok), 2.0f);
      std::vector<float> want(size_t(n_tok) * rows);
      cpu->matmul_head(w, Tensor{const_cast<float*>(x.data()), n_tok, cols}, 8.0f, Tensor{want.data(), n_tok, rows});
      std::vector<BlockQ8> l1(size_t(n_tok) * nb), l2(l1.size()), want1(l1.size()), want2(l1.size());
      emu::head_levels(x.data(), int64_t(l1.size()), l1.data(), l2.data());
      // The two levels by their definition: x's blocks; the residual x - d q
      // (one rounding) quantized, its s the block's sum in order less level one's.
      quantize_q8(x.data(), x.size(), want1.data());
      std::vector<float> residual(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        residual[i] = std::fma(-want1[i / 32].d, float(want1[i / 32].qs[i % 32]), x[i]);
      quantize_q8(residual.data(), residual.size(), want2.data());
      for (size_t b = 0; b < want2.size(); ++b) {
        float sum = 0.0f;
        for (size_t i = 0; i < 32; ++i) sum += x[b * 32 + i];
        want2[b].s = sum - want1[b].s;
      }
      ASSERT_EQ(std::memcmp(l1.data(), want1.data(), l1.size() * sizeof(BlockQ8)), 0) << "level one";
      ASSERT_EQ(std::memcmp(l2.data(), want2.data(), l2.size() * sizeof(BlockQ8)), 0) << "level two";
      std::vector<float> y1(size_t(n_tok) * rows), y2(y1.size());
      for (int r0 = 0; r0 < rows; r0 += 16) {
        const uint32_t* group = w.packed.data() + size_t(r0 / 16) * group_words;
        const int nr = std::min(16, rows - r0);
        for (auto [acts, y] : {std::pair{&l1, &y1}, std::pair{&l2, &y2}}) {
          if (layout == PackLayout::kQ4)
            (isa == Isa::kAvx512 ? qdot16_avx512 : isa == Isa::kAvx2 ? qdot16_avx2 : qdot16_scalar)(
                group, nb, nr, acts->data(), n_tok, y->data() + r0, rows);
          else
            (isa == Isa::kAvx512 ? qdot16q8_avx512 : isa == Isa::kAvx2 ? qdot16q8_avx2 : qdot16q8_scalar)(
                layout, group, nb, nr, acts->data(), n_tok, y->data() + r0, rows);
        }
      }
      std::vector<float> floor(static_cast<size_t>(n_tok)), got(y1.size());
      emu::head_refine(y1.data(), y2.data(), n_tok, rows, 8.0f, floor.data(), got.data());
      expect_same_bits(got, want, "head");
    }
  }
}

}  // namespace
}  // namespace cs
