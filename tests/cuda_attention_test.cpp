// The CUDA kernels against the CPU reference on the same trees and plans
// (attn/cuda_attention.h, kv/device_kv_memory.h). Where no GPU is present
// each test says so and skips, except those of the errors without one.
//
// Tolerance: the kernels round the scaled queries and the softmax's
// probabilities to the K/V type (unit roundoff e: 2^-11 for fp16, 2^-8 for
// bf16); a score of d terms then errs by about e * sqrt(d) (random signs, |q|
// of 2 and |k| of 1 in these worlds), a probability by as much relatively,
// and an output (a weighted mean of values of magnitude up to ~4) by a few
// times that: the tests allow 8 * e * sqrt(d) and print the worst error seen.
#include "attn/cuda_attention.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "attn_world.h"
#include "base/cuda.h"
#include "base/error.h"
#include "kv/device_kv_memory.h"
#include "kv/host_kv_memory.h"

namespace cs {
namespace {

using namespace cs::test;

#define REQUIRE_GPU()                                                   \
  do {                                                                  \
    std::string why;                                                    \
    if (!cuda::device_available(&why)) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

float tolerance(KvType type, int d) {
  const float e = type == KvType::kF16 ? 1.0f / 2048 : 1.0f / 256;
  return 8 * e * std::sqrt(float(d));
}

template <class T>
cuda::Buffer upload(const std::vector<T>& v) {
  cuda::Buffer b(std::max<size_t>(v.size(), 1) * sizeof(T));
  cuda::to_device(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

// A world's pool, queries and windows on the device.
struct OnDevice {
  DeviceKvMemory kv;
  cuda::Buffer q, out, window;
  size_t n = 0;
  OnDevice(const HostTree& tree, const std::vector<float>& qv, const std::vector<int>& window_first)
      : kv(tree.layout(), tree.pool().capacity()), q(upload(qv)), out(qv.size() * 4), n(qv.size()) {
    kv.upload(tree.pool(), tree.pool().capacity());
    if (!window_first.empty()) window = upload(std::vector<int32_t>(window_first.begin(), window_first.end()));
  }
  // The plan's attention, `calls` times over (each a layer's call on one
  // plan: the merge counters must be ready again after every call).
  std::vector<float> run(const AttnPlan& plan, AttnPath path, int window_keys, int layer, int calls = 1) {
    CudaAttention attn;
    attn.set_plan(plan_tiles(plan, path, {window_keys}));
    for (int i = 0; i < calls; ++i) {
      cuda::memset_device(out.get(), 0xff, n * 4);  // NaN: a row nobody writes shows
      attn.run(kv, layer, q.as<float>(), out.as<float>(), window.get() ? window.as<int32_t>() : nullptr);
    }
    cuda::synchronize();
    std::vector<float> got(n);
    cuda::to_host(got.data(), out.get(), n * 4);
    return got;
  }
};

float g_worst = 0;  // the largest error seen, as a fraction of its tolerance

void check(const Case& c, int window_keys) {
  SCOPED_TRACE(name(c) + " window_keys " + std::to_string(window_keys));
  World w(c);
  std::vector<float> ref;
  attn_reference(*w.tree, w.problem(ref));
  OnDevice dev(*w.tree, w.q, w.run->window_first);
  const float tol = tolerance(c.type, c.d);
  const auto per = dev.run(w.run->plan, AttnPath::kPerSequence, window_keys, 1);
  const auto tpp = dev.run(w.run->plan, AttnPath::kTpp, window_keys, 1, 3);
  const auto relay = dev.run(w.run->plan, AttnPath::kRelay, window_keys, 1);
  const float err = max_diff(per, ref);
  g_worst = std::max(g_worst, err / tol);
  EXPECT_LT(err, tol) << "per-sequence vs the reference";
  EXPECT_EQ(tpp, per) << "two-phase partition vs per-sequence";
  EXPECT_EQ(relay, per) << "relay vs per-sequence";
}

TEST(CudaAttention, RandomTreesAgreeWithTheReferenceAndAcrossPaths) {
  REQUIRE_GPU();
  g_worst = 0;
  uint32_t seed = 1;
  for (int d : {64, 128, 256})
    for (int group : {1, 3, 4, 8})
      for (KvType type : {KvType::kF16, KvType::kBF16})
        for (int window_keys : {64, 512}) check({1 + int(seed * 37 % 24), 1 + int(seed % 2), group, d, type, seed++}, window_keys);
  std::printf("worst error: %.3f of the tolerance\n", g_worst);
}

TEST(CudaAttention, PrefillRowsAndSlidingWindows) {
  REQUIRE_GPU();
  uint32_t seed = 300;
  for (int window : {0, 1, 37, 100, 1000})
    for (bool prefill : {false, true})
      for (int window_keys : {64, 512}) {
        const int d = seed % 3 == 0 ? 256 : seed % 3 == 1 ? 64 : 128;
        check({1 + int(seed * 37 % 24), 1 + int(seed % 2), 1 + int(seed % 4), d, KvType(1 + seed % 2), seed, prefill,
               window},
              window_keys);
        ++seed;
      }
}

TEST(CudaAttention, LargeBatches) {
  REQUIRE_GPU();
  for (int batch : {32, 96}) check({batch, 2, 4, 128, KvType::kF16, 100u + uint32_t(batch)}, 64);
}

// Long walks: five sequences share a 45-chunk-and-a-bit prefix and own 0-33
// chunks each. In the batch (every path) and each alone in a tree of its own,
// a sequence's rows get the same bits: batch-invariant, sharing-invariant.
TEST(CudaAttention, LongWalksAloneAndInTheBatchAreBitIdentical) {
  REQUIRE_GPU();
  for (const auto& [d, type, group, window] :
       {std::tuple{128, KvType::kF16, 4, 0}, std::tuple{64, KvType::kBF16, 1, 0}, std::tuple{256, KvType::kF16, 2, 700}}) {
    SCOPED_TRACE("d " + std::to_string(d) + " " + kv_type_name(type) + " window " + std::to_string(window));
    const KvLayout L{1, 2, d, 64, type};
    constexpr int kShared = 45 * 64 + 20, kSeqs = 5;
    const int own[kSeqs] = {0, 1, 100, 1000, 2100};
    auto add = [&](HostTree& t, int s) {
      std::vector<int32_t> pr(size_t(kShared), 3);
      for (int i = 0; i < own[s]; ++i) pr.push_back(100 + s);
      int m;
      ASSERT_TRUE(t.join(SeqId(s), pr, &m).ok());
      ASSERT_TRUE(t.append(SeqId(s), std::span(pr).subspan(size_t(m))).ok());
      std::vector<float> k(static_cast<size_t>(d)), v(static_cast<size_t>(d));
      for (int i = m; i < int(pr.size()); ++i) {
        std::mt19937 rng(uint32_t(i < kShared ? i : 100000 * (s + 1) + i));
        std::normal_distribution<float> nd;
        for (int h = 0; h < 2; ++h) {
          for (int x = 0; x < d; ++x) k[size_t(x)] = nd(rng), v[size_t(x)] = nd(rng);
          t.write_kv(SeqId(s), i, 0, h, k.data(), v.data());
        }
      }
    };
    const int n_heads = 2 * group;
    std::vector<float> q(size_t(kSeqs * n_heads * d));
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (auto& x : q) x = nd(rng) * 2;
    HostTree all(L, L.chunk_bytes() * 160);
    for (int s = 0; s < kSeqs; ++s) add(all, s);
    Planned batch(all, {}, n_heads);
    if (window) batch.set_window(window);
    std::vector<float> ref(q.size());
    attn_reference(all, batch.problem(q.data(), ref.data()));
    OnDevice dev(all, q, batch.window_first);
    const auto per = dev.run(batch.plan, AttnPath::kPerSequence, 512, 0);
    EXPECT_LT(max_diff(per, ref), tolerance(type, d));
    EXPECT_EQ(dev.run(batch.plan, AttnPath::kTpp, 512, 0), per);
    EXPECT_EQ(dev.run(batch.plan, AttnPath::kRelay, 512, 0), per);
    EXPECT_GT(plan_tiles(batch.plan, AttnPath::kTpp).shared_tiles, 0);
    const size_t row = size_t(n_heads * d);
    for (int s = 0; s < kSeqs; ++s) {
      HostTree lone(L, L.chunk_bytes() * 128);
      add(lone, s);
      Planned one(lone, {}, n_heads);
      if (window) one.set_window(window);
      const std::vector<float> qs(q.begin() + long(s * row), q.begin() + long((s + 1) * row));
      OnDevice d1(lone, qs, one.window_first);
      const auto alone = d1.run(one.plan, AttnPath::kPerSequence, 512, 0);
      EXPECT_EQ(alone, std::vector<float>(per.begin() + long(s * row), per.begin() + long((s + 1) * row)))
          << "sequence " << s << " alone vs in the batch";
    }
  }
}

// The device KV memory's copies give the host memory's bytes.
TEST(DeviceKvMemory, CopiesMatchTheHostMemory) {
  REQUIRE_GPU();
  for (KvType type : {KvType::kF16, KvType::kBF16}) {
    SCOPED_TRACE(kv_type_name(type));
    const KvLayout L{3, 2, 128, 64, type};
    const int cap = 6;
    HostKvMemory host(L, cap);
    DeviceKvMemory dev(L, cap);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const int n = 100;
    std::vector<int32_t> slots(n);
    for (int i = 0; i < n; ++i) slots[size_t(i)] = int32_t((i * 37) % (cap * 64));  // distinct slots, scattered
    std::vector<float> k(size_t(n) * 2 * 128), v(k.size());
    for (auto& x : k) x = nd(rng) * 3;
    for (auto& x : v) x = nd(rng) * 3;
    const auto ds = upload(slots);
    const auto dk = upload(k), dv = upload(v);
    for (int layer : {0, 2}) {
      host.write_rows(layer, slots.data(), n, k.data(), v.data());
      dev.write_rows(layer, ds.as<int32_t>(), n, dk.as<float>(), dv.as<float>());
    }
    host.copy_prefix(1, 4, 23);
    dev.copy_prefix(1, 4, 23);
    std::vector<uint8_t> a(L.chunk_bytes()), b(L.chunk_bytes());
    for (ChunkId c = 0; c < cap; ++c) {
      host.read_chunk(c, a.data());
      dev.read_chunk(c, b.data());
      EXPECT_EQ(a, b) << "chunk " << c;
    }
    for (auto& x : a) x = uint8_t(rng());
    dev.write_chunk(5, a.data());
    dev.read_chunk(5, b.data());
    EXPECT_EQ(a, b);
  }
}

TEST(DeviceKvMemory, MoreThanTheDeviceHoldsIsAClearError) {
  REQUIRE_GPU();
  const KvLayout L{32, 8, 128, 64, KvType::kF16};  // 8 MiB a chunk
  const int chunks = int(cuda::device_info().memory_bytes / L.chunk_bytes()) + 64;
  try {
    DeviceKvMemory kv(L, chunks);
    FAIL() << "allocated more than the device holds";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNoRoom);
    EXPECT_NE(std::string(e.what()).find("the KV pool (--kv-memory): cannot allocate"), std::string::npos) << e.what();
  }
}

// Without a device (or without CUDA in the build) the GPU types refuse to be
// made, with the reason.
TEST(CudaAttention, WithoutADeviceConstructionSaysWhy) {
  std::string why;
  if (cuda::device_available(&why)) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(why.empty());
  try {
    CudaAttention attn;
    FAIL() << "made without a device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("CUDA attention: ", 0), 0u) << e.what();
  }
  EXPECT_THROW(DeviceKvMemory(KvLayout{1, 1, 64, 64, KvType::kF16}, 1), Error);
}

}  // namespace
}  // namespace cs
