// The CUDA backend (model/cuda_ops.cpp, model/cuda_matmul.cpp: compiled into
// this binary) on an emulated device: its kernels by tests/emu/cuda_emu.h,
// its runtime by tests/emu/fake_device.cpp (host memory, NaN-filled when
// allocated). Whole forward passes of every architecture's tiny model with
// quantized matrices (Q8_0, Q4_0: on the "device"), the KV in host memory:
// the CPU backend's logits bit for bit. This checks the backend's own host
// code (buffers, uploads, the head's two levels, the experts) on any machine;
// the GPU tests (tests/cuda_ops_test.cpp) check it on a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/cuda.h"
#include "cache/contiguous_kv.h"
#include "model/cuda_matmul.h"
#include "model/cuda_ops.h"
#include "model/llama.h"
#include "tiny_model.h"

namespace cs {
namespace {

std::vector<float> run(const LlamaModel& m) {
  ContiguousKv kv(m.config().kv_shape(), 128);
  Workspace ws;
  std::vector<float> logits, all;
  Batch prompt;
  for (int t = 0; t < 12; ++t) prompt.add(3 + (t * 37) % 260, t, 0, t % 5 == 0 || t == 11);
  m.forward(prompt, kv, ws, logits);
  all = logits;
  Batch step;
  step.add(270, 12, 0, true);
  m.forward(step, kv, ws, logits);
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

TEST(CudaBackendEmulated, EveryArchitecturesForwardPassIsTheCpus) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  for (const char* arch : {"llama", "llama3", "qwen2", "qwen3", "gemma3", "qwen3moe", "gpt-oss"})
    for (uint32_t type : {8u, 2u}) {
      if (type == 2 && std::string(arch) != "llama3" && std::string(arch) != "qwen3moe") continue;  // Q4_0: two will do
      SCOPED_TRACE(std::string(arch) + (type == 8 ? ", Q8_0" : ", Q4_0"));
      test::TinyModelShape shape = test::tiny_arch_shape(arch);
      shape.matrix_type = type;
      const std::string path = test::tiny_model(std::string("emu_") + arch + (type == 8 ? "_q8" : "_q4"), shape);
      const auto on_cpu = LlamaModel::load(path);
      const auto on_gpu = LlamaModel::load(path, cuda_backend());
      ASSERT_NE(on_gpu->output().device, nullptr);  // the head on the "device"
      ASSERT_NE(on_gpu->layers()[0].wq.device, nullptr);
      const std::vector<float> a = run(*on_cpu), b = run(*on_gpu);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "logit " << i << ": " << a[i] << " vs " << b[i];
    }
}

// Decode steps with the launches recorded and replayed as "graphs"
// (base/launch_queue.h on the fake device: a graph is its launches' closures
// kept with their arguments) give the logits of launches sent one by one,
// bit for bit, and most of the steps' launches are replayed: every point
// where the host meets the device sends what is pending first.
TEST(CudaBackendEmulated, DecodeStepsReplayedAsGraphsAreTheSame) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  test::TinyModelShape shape = test::tiny_arch_shape("llama3");
  shape.matrix_type = 8;
  const auto m = LlamaModel::load(test::tiny_model("emu_llama3_q8", shape), cuda_backend());
  std::vector<uint64_t> step_flushes;  // each decode step's flush points
  auto decode = [&] {
    step_flushes.clear();
    ContiguousKv kv(m->config().kv_shape(), 128);
    Workspace ws;
    std::vector<float> logits, all;
    Batch prompt;
    for (int t = 0; t < 9; ++t) prompt.add(5 + t * 11, t, 0, t == 8);
    m->forward(prompt, kv, ws, logits);
    for (int t = 9; t < 15; ++t) {
      Batch step;
      step.add(int32_t(logits.size() % 200) + t, t, 0, true);
      const cuda::LaunchStats at = cuda::launch_stats();
      m->forward(step, kv, ws, logits);
      step_flushes.push_back((cuda::launch_stats() - at).flushes);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  cuda::set_graphs(false);
  const std::vector<float> one_by_one = decode();
  cuda::set_graphs(true);
  const cuda::LaunchStats before = cuda::launch_stats();
  const std::vector<float> graphed = decode();
  const cuda::LaunchStats s = cuda::launch_stats() - before;
  std::printf("%llu launches, sent at %llu points: %llu replayed, %llu updated, %llu built, %llu one by one\n",
              (unsigned long long)s.launches, (unsigned long long)s.flushes, (unsigned long long)s.replays,
              (unsigned long long)s.updates, (unsigned long long)s.builds, (unsigned long long)s.direct);
  ASSERT_EQ(one_by_one.size(), graphed.size());
  EXPECT_EQ(std::memcmp(one_by_one.data(), graphed.data(), graphed.size() * sizeof(float)), 0);
  EXPECT_GE(s.replays, 10u);  // from the second step on, each layer's run
  // A step is sent at each layer's KV exchange with the host and at the
  // logits, nowhere else: its small inputs (tokens, RoPE angles, the head's
  // rows) went over before its first launch (LayerOps::stage).
  for (uint64_t f : step_flushes) EXPECT_EQ(f, uint64_t(shape.n_layers) + 1);
}

}  // namespace
}  // namespace cs
