// The CUDA backend (model/cuda_ops.cpp, model/cuda_matmul.cpp: compiled into
// this binary) on an emulated device: its kernels by tests/emu/cuda_emu.h,
// its runtime by tests/emu/fake_device.cpp (host memory, NaN-filled when
// allocated). Whole forward passes of every architecture's tiny model with
// quantized matrices (Q8_0, Q4_0) and float ones (F32): on the "device"), the KV in host memory:
// the CPU backend's logits bit for bit. This checks the backend's own host
// code (buffers, uploads, the head's two levels, the experts) on any machine;
// the GPU tests (tests/cuda_ops_test.cpp) check it on a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu.h"
#include "base/cuda.h"
#include "base/error.h"
#include "cuda_helpers.h"
#include "cache/contiguous_kv.h"
#include "emu/fake_device.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "model/cuda_matmul.h"
#include "model/cuda_ops.h"
#include "model/llama.h"
#include "model/sequence_kv.h"
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
  for (const char* arch : {"llama", "llama3", "qwen2", "qwen3", "gemma3", "qwen3moe", "gpt-oss", "phi3", "mistral3", "smollm3", "granite",
                           "gemma2", "olmo2", "glm4"})
    for (uint32_t type : {8u, 2u, 0u}) {
      const std::string arc = arch;
      if (type == 2 && arc != "llama3" && arc != "qwen3moe") continue;                     // Q4_0: two will do
      if (type == 0 && arc != "llama3" && arc != "qwen3moe" && arc != "gemma3") continue;  // F32: the float matmul
      const char* name = type == 8 ? "_q8" : type == 2 ? "_q4" : "_f32";
      SCOPED_TRACE(arc + name);
      test::TinyModelShape shape = test::tiny_arch_shape(arch);
      shape.matrix_type = type;
      const std::string path = test::tiny_model("emu_" + arc + name, shape);
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

// What the GPU's attention does not run yet keeps a device model's KV on
// the host, with the reason the engine shows: Gemma 2's soft-capped scores,
// gpt-oss's sinks, Phi-3.5's head dim 96; the others' KV goes to the device.
TEST(CudaBackendEmulated, TheKvStaysOnTheHostWhereTheGpusAttentionCannotRun) {
  for (const char* arch : {"gemma2", "gpt-oss", "phi3", "gemma3", "llama3"}) {
    SCOPED_TRACE(arch);
    const auto m = LlamaModel::load(test::tiny_model(std::string("emu_place_") + arch, test::tiny_arch_shape(arch)),
                                    cuda_backend());
    std::string why;
    const KvPlace place = kv_place(*m, KvType::kF16, &why);
    const std::string a = arch;
    const std::string what = a == "gemma2" ? "attention logit soft-capping (Gemma 2)"
                             : a == "gpt-oss" ? "attention sinks (gpt-oss)"
                             : a == "phi3"    ? "head dim 96"
                                              : "";
    EXPECT_EQ(place, what.empty() ? KvPlace::kDevice : KvPlace::kHost);
    EXPECT_EQ(why, what.empty() ? "" : "the KV stays in host memory: the GPU's attention does not run " + what + " yet");
  }
}

// A norm over whole rows and the gated FFN quantize what they write, and the
// next matmuls of that tensor take those blocks instead of quantizing it
// again, only until another step writes it (or anything else runs): every
// product below is the CPU's, bit for bit, after each kind of write.
TEST(CudaBackendEmulated, AStepsQuantizedOutputServesOnlyUntilTheNextStep) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  const auto cpu = cpu_backend().ops(), gpu = cuda_backend().ops();
  const int n = 3, cols = 64, rows = 48;
  std::mt19937 rng(5);
  const std::vector<uint8_t> a = random_matrix(GgmlType::Q8_0, rows, cols, rng),
                             d = random_matrix(GgmlType::Q8_0, cols, rows, rng);
  const Weight ca = cpu_backend().matrix(GgmlType::Q8_0, rows, cols, a.data()),
               ga = cuda_backend().matrix(GgmlType::Q8_0, rows, cols, a.data()),
               cd = cpu_backend().matrix(GgmlType::Q8_0, cols, rows, d.data()),
               gd = cuda_backend().matrix(GgmlType::Q8_0, cols, rows, d.data());
  ASSERT_NE(ga.device, nullptr);
  const std::vector<float> w = normal(cols, 6), b = normal(cols, 7), fresh = normal(size_t(n) * cols, 8);
  // The same steps on both backends, each side's tensors its own.
  struct Side {
    LayerOps& ops;
    const Weight &a, &d;
    TensorBuf bx, by, bo, bg, bu, bz;
    Tensor x, y, o, g, u, z;
  };
  std::vector<float> xs = normal(size_t(n) * cols, 1), ys = normal(size_t(n) * cols, 2),
                     gs = normal(size_t(n) * rows, 3), us = normal(size_t(n) * rows, 4);
  auto make = [&](LayerOps& ops, const Weight& wa, const Weight& wd) {
    auto s = std::make_unique<Side>(Side{ops, wa, wd, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}});
    s->x = ops.shape(s->bx, n, cols), s->y = ops.shape(s->by, n, cols), s->o = ops.shape(s->bo, n, rows);
    s->g = ops.shape(s->bg, n, rows), s->u = ops.shape(s->bu, n, rows), s->z = ops.shape(s->bz, n, cols);
    ops.to_device(xs.data(), s->x), ops.to_device(ys.data(), s->y);
    ops.to_device(gs.data(), s->g), ops.to_device(us.data(), s->u);
    return s;
  };
  const auto c = make(*cpu, ca, cd), gp = make(*gpu, ga, gd);
  auto expect_same = [&](const char* what, Tensor Side::*t) {
    std::vector<float> want(((*c).*t).size()), got(want.size());
    c->ops.to_host((*c).*t, want.data()), gp->ops.to_host((*gp).*t, got.data());
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << what << " at " << i << ": " << got[i] << " vs " << want[i];
  };
  for (Side* s : {c.get(), gp.get()}) s->ops.add_rmsnorm(s->x, s->y, w, 1e-5f, s->y);
  for (Side* s : {c.get(), gp.get()}) s->ops.matmul(s->a, s->y, s->o);
  expect_same("the matmul after add_rmsnorm", &Side::o);
  for (Side* s : {c.get(), gp.get()}) s->ops.add_bias(s->y, b), s->ops.matmul(s->a, s->y, s->o);
  expect_same("after add_bias wrote the norm's output", &Side::o);
  for (Side* s : {c.get(), gp.get()}) s->ops.rmsnorm(s->y, w, 1e-5f, s->y), s->ops.to_device(fresh.data(), s->y);
  for (Side* s : {c.get(), gp.get()}) s->ops.matmul(s->a, s->y, s->o);
  expect_same("after new values were copied over the norm's output", &Side::o);
  for (Side* s : {c.get(), gp.get()}) s->ops.rmsnorm(s->y, w, 1e-5f, s->y), s->ops.scale(s->y, 0.37f);
  for (Side* s : {c.get(), gp.get()}) s->ops.matmul(s->a, s->y, s->o);
  expect_same("after scale", &Side::o);
  for (Side* s : {c.get(), gp.get()}) s->ops.rmsnorm(s->x, w, 1e-5f, s->y), s->ops.add(s->y, s->x);
  for (Side* s : {c.get(), gp.get()}) s->ops.matmul(s->a, s->y, s->o);
  expect_same("after add", &Side::o);
  for (Side* s : {c.get(), gp.get()}) s->ops.gated_ffn(FfnAct::kSilu, s->g, s->u), s->ops.matmul(s->d, s->g, s->z);
  expect_same("the matmul after the gated FFN", &Side::z);
  const std::vector<float> half(rows, 0.5f);
  for (Side* s : {c.get(), gp.get()}) s->ops.gated_ffn(FfnAct::kSilu, s->g, s->u), s->ops.add_bias(s->g, half);
  for (Side* s : {c.get(), gp.get()}) s->ops.matmul(s->d, s->g, s->z);
  expect_same("after add_bias wrote the gated FFN's output", &Side::z);
}

// The head's rows go over with the step's stage() and are gathered from
// that copy; a count other than the staged one is an error, not a gather
// past them.
TEST(CudaBackendEmulated, TheHeadsStagedRowsAreGathered) {
  const auto ops = cuda_backend().ops();
  const int n = 9, cols = 40;
  std::vector<float> xs(size_t(n) * cols);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i) * 0.25f;
  TensorBuf xb, ob;
  const Tensor x = ops->shape(xb, n, cols);
  ops->to_device(xs.data(), x);
  const std::vector<int> rows = {8, 0, 3};
  ops->stage({}, rows);
  const Tensor out = ops->shape(ob, int(rows.size()), cols);
  ops->copy_staged_rows(x, rows, out);
  std::vector<float> got(rows.size() * cols);
  ops->to_host(out, got.data());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < cols; ++c)
      ASSERT_EQ(got[i * cols + size_t(c)], xs[size_t(rows[i]) * cols + size_t(c)]) << "row " << i << " col " << c;
  const std::vector<int> other = {1, 2};
  try {
    ops->copy_staged_rows(x, other, ops->shape(ob, 2, cols));
    FAIL() << "two rows gathered where three were staged";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "copy_staged_rows: not the rows this step staged");
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
  std::vector<uint64_t> step_flushes, step_launches;  // each decode step's flush points and kernel launches
  auto decode = [&] {
    step_flushes.clear(), step_launches.clear();
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
      step_launches.push_back((cuda::launch_stats() - at).launches);
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
  // Its launches (the KV on the host): the first norm; per layer q, k and v
  // in one matmul (the norm quantized its output), RoPE of q and k, the
  // output matrix's quantize and matmul, a norm, gate and up in one matmul,
  // the gated FFN (quantizing), down, the residual's norm (or the last add);
  // then the head's rows gathered and normed, its two levels quantized (one
  // kernel), its matmul, its row maxima and refinement.
  for (uint64_t l : step_launches) EXPECT_EQ(l, 1 + 9 * uint64_t(shape.n_layers) + 6);
}

// An engine on the device has its largest step's device memory from the
// start (Engine::Impl::reserve_device_step): serving requests of every size
// up to it makes no buffer, and a device without room for it fails at start,
// saying what to lower. The tokens are the CPU engine's. (The KV in host
// memory: an f32 KV, which the device does not hold.)
TEST(CudaBackendEmulated, EngineHasItsLargestStepsMemoryAtStart) {
  if (cpu_isa() < Isa::kAvx2) GTEST_SKIP() << "the device matmul gives the AVX2 and AVX-512 kernels' bits";
  test::TinyModelShape shape = test::tiny_arch_shape("llama3");
  shape.matrix_type = 8;
  const std::string path = test::tiny_model("emu_llama3_q8", shape);
  const auto on_gpu = LlamaModel::load(path, cuda_backend());
  const auto on_cpu = LlamaModel::load(path);
  EngineOptions o = test::engine_options(AttnMode::kTpp, 2, 1);
  o.kv_type = KvType::kF32, o.step_tokens = 24, o.speculate = false, o.speculate_max_batch = 0, o.n_ctx = 96;
  std::vector<Request> reqs = test::shared_prompts(3, 20, 5, 12);  // prompts of 32 to 34 tokens: two steps each

  const size_t weights = cuda::fake::memory_in_use();
  cuda::fake::set_memory_limit(weights + 4096);
  try {
    Engine e(*on_gpu, o);
    ADD_FAILURE() << "an engine started on a device without room for its step";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kNoRoom);
    const std::string m = err.what();
    std::printf("the start's error: %s\n", m.c_str());
    EXPECT_NE(m.find("cannot allocate"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
    EXPECT_NE(m.find("a step of 24 tokens (2 with logits)"), std::string::npos) << m;
    EXPECT_NE(m.find("lower --kv-memory, --step-tokens or --max-batch"), std::string::npos) << m;
  }
  cuda::fake::set_memory_limit(0);
  EXPECT_EQ(cuda::fake::memory_in_use(), weights);  // what the failed start had is back

  std::vector<Result> got;
  {
    Engine e(*on_gpu, o);
    const uint64_t at_start = cuda::fake::allocations();
    EXPECT_EQ(e.stats().kv.used + e.stats().kv.cached, 0);  // the first step left nothing in the tree
    got = test::run_all(e, reqs);
    EXPECT_EQ(cuda::fake::allocations(), at_start) << "device buffers made after the start";
  }
  Engine cpu(*on_cpu, o);
  test::expect_same_tokens(got, test::run_all(cpu, reqs), "the emulated device's engine vs the CPU's");
}

}  // namespace
}  // namespace cs
