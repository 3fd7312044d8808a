// A sequence's KV on the (emulated) device, as the engine and `perplexity`
// keep it there (cache/prefix_kv.h on KvPlace::kDevice: the scatter of a
// step's rows, the tile plan, the attention, the rows gathered back in batch
// order), against the CPU's contiguous cache fed the same rows: every layer's
// output within the attention tests' tolerance (cuda_attention_test.cpp),
// for prefills that end inside a chunk, on a chunk's edge and past it, then a
// decode step. The fake device's pointers are host memory, so both stores
// take the same arrays.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "base/cuda.h"
#include "base/error.h"
#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"
#include "emu/fake_device.h"
#include "kv/device_kv_memory.h"

namespace cs {
namespace {

TEST(DeviceKvStore, AttendsAsTheContiguousCacheDoes) {
  constexpr int kLayers = 3, kHeads = 8, kKvHeads = 2;
  for (const auto& [d, type] : {std::pair{64, KvType::kF16}, std::pair{128, KvType::kBF16}})
    for (const int n_tok : {1, 63, 64, 100, 130}) {
      SCOPED_TRACE("d " + std::to_string(d) + " " + kv_type_name(type) + " prefill " + std::to_string(n_tok));
      ContiguousKv host(KvShape{kLayers, kHeads, kKvHeads, d}, 256, type);
      const KvLayout layout{kLayers, kKvHeads, d, 64, type};
      PrefixKv dev(layout, layout.chunk_bytes() * 8, kHeads, AttnPath::kPerSequence, false, KvPlace::kDevice);
      ASSERT_TRUE(dev.on_device());
      int matched = 0;
      ASSERT_TRUE(dev.join(0, {}, &matched).ok());
      std::mt19937 rng(uint32_t(n_tok * 7 + d));
      std::normal_distribution<float> nd;
      // |q| of 2 and |k| of 1, as the attention tests' tolerance assumes.
      const float e = type == KvType::kF16 ? 1.0f / 2048 : 1.0f / 256, tol = 8 * e * std::sqrt(float(d));
      int pos = 0;
      for (const int step : {n_tok, 1}) {
        Batch b;
        for (int i = 0; i < step; ++i, ++pos) b.add(1000 + pos, pos, 0, true);
        host.begin_batch(b);
        dev.begin_batch(b);
        for (int l = 0; l < kLayers; ++l) {
          std::vector<float> k(size_t(step) * kKvHeads * d), v(k.size()), q(size_t(step) * kHeads * d);
          for (auto& x : k) x = nd(rng);
          for (auto& x : v) x = nd(rng);
          for (auto& x : q) x = nd(rng) * 2;
          std::vector<float> want(q.size()), got(q.size(), NAN);
          host.store(l, k.data(), v.data());
          dev.store(l, k.data(), v.data());
          host.attend(l, q.data(), want.data(), {});
          dev.attend(l, q.data(), got.data(), {});
          cuda::synchronize();
          float worst = 0;
          for (size_t i = 0; i < got.size(); ++i)
            worst = std::isnan(got[i]) ? INFINITY : std::max(worst, std::fabs(got[i] - want[i]));
          EXPECT_LT(worst, tol) << "layer " << l << ", a step of " << step << " tokens";
        }
      }
    }
}

// The pool is the device's memory like any buffer (base/cuda.h's Buffer):
// counted while it lives, zeroed at start (a chunk's unwritten tail holds
// finite values), given back when it goes, and a device without room for it
// is a kNoRoom error at construction that names --kv-memory.
TEST(DeviceKvMemory, ThePoolIsDeviceMemoryAndTooLargeAPoolSaysSo) {
  const KvLayout L{2, 2, 64, 64, KvType::kF16};
  const size_t before = cuda::fake::memory_in_use();
  {
    DeviceKvMemory kv(L, 10);
    EXPECT_EQ(cuda::fake::memory_in_use(), before + 10 * L.chunk_bytes());
    std::vector<uint8_t> chunk(L.chunk_bytes(), 0xab);
    kv.read_chunk(9, chunk.data());
    EXPECT_EQ(chunk, std::vector<uint8_t>(L.chunk_bytes(), 0));
  }
  EXPECT_EQ(cuda::fake::memory_in_use(), before);
  cuda::fake::set_memory_limit(before + 5 * L.chunk_bytes());
  try {
    DeviceKvMemory kv(L, 10);
    ADD_FAILURE() << "a pool of 10 chunks where 5 fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNoRoom);
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA: the KV pool (--kv-memory): cannot allocate 1 MiB on the device ("), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  cuda::fake::set_memory_limit(0);
  EXPECT_EQ(cuda::fake::memory_in_use(), before);
}

}  // namespace
}  // namespace cs
