// The CUDA backend (model/cuda_ops.cpp, model/cuda_matmul.cpp: compiled into
// this binary) on an emulated device: its kernels by tests/emu/cuda_emu.h,
// its runtime by tests/emu/fake_device.cpp (host memory, NaN-filled when
// allocated). Whole forward passes of every architecture's tiny model with
// quantized matrices (Q8_0, Q4_0: on the "device"), the KV in host memory:
// the CPU backend's logits bit for bit. This checks the backend's own host
// code (buffers, uploads, the head's two levels, the experts) on any machine;
// the GPU tests (tests/cuda_ops_test.cpp) check it on a device.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/cpu.h"
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

}  // namespace
}  // namespace cs
