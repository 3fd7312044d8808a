// The CUDA backend (model/cuda_ops.h) against the CPU's, bit for bit: each
// layer step on the same values, the refined output head on random
// matrices, and whole forward passes of every architecture's tiny model
// (with the host's KV store, so attention is the same code): the same
// logits. Where no GPU is present each test says so and skips, except the
// error a user gets without one.
#include "model/cuda_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "base/error.h"
#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"
#include "engine/engine.h"
#include "engine_helpers.h"
#include "pml/pml.h"
#include "cuda_helpers.h"
#include "model/cpu_ops.h"
#include "model/llama.h"
#include "tiny_model.h"

namespace cs {
namespace {

// A device tensor holding `v` (rows x cols), and its values read back.
struct DevTensor {
  cuda::Buffer buf;
  Tensor t;
  DevTensor(const std::vector<float>& v, int rows, int cols) : buf(upload(v)), t{buf.as<float>(), rows, cols} {}
  std::vector<float> values() const { return download<float>(buf, t.size()); }
};

// The same bits, except that any NaN equals any NaN: a NaN's sign and payload
// are the hardware's (x86 keeps the input's, the GPU returns its canonical
// 0x7fffffff; the H200 gave gated_ffn's NaN edge so), not the operation's.
void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(CudaOps, WithoutAGpuTheBackendSaysWhy) {
  std::string why;
  if (cuda::device_available(&why)) GTEST_SKIP() << "a GPU is present";
  try {
    cuda_backend();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--device cuda: " + why);
  }
}

TEST(CudaOps, EachStepIsTheCpusBitForBit) {
  REQUIRE_GPU();
  const auto gpu = cuda_backend().ops();
  const auto cpu = cpu_backend().ops();
  EXPECT_TRUE(gpu->on_device());
  EXPECT_FALSE(cpu->on_device());
  const int n = 37, cols = 576, head = 64;
  std::vector<float> xs = normal(size_t(n) * cols, 1), ys = normal(size_t(n) * cols, 2);
  for (int t = 0; t < n; ++t) xs[size_t(t) * cols + size_t(t * 13 % cols)] *= 4000.0f;  // outliers, as SmolLM2's
  const std::vector<float> w = normal(cols, 3), b = normal(cols, 4);

  auto both = [&](const char* what, auto&& step) {
    std::vector<float> host = xs;
    DevTensor dev(xs, n, cols);
    step(*cpu, Tensor{host.data(), n, cols});
    step(*gpu, dev.t);
    expect_same_bits(dev.values(), host, what);
  };
  both("rmsnorm, rows", [&](LayerOps& o, Tensor x) { o.rmsnorm(x, w, 1e-5f, x); });
  both("rmsnorm, heads", [&](LayerOps& o, Tensor x) { o.rmsnorm(x, std::span(w).first(head), 1e-6f, x); });
  both("add_bias", [&](LayerOps& o, Tensor x) { o.add_bias(x, b); });
  both("scale", [&](LayerOps& o, Tensor x) { o.scale(x, 0.0883883f); });
  {
    DevTensor dy(ys, n, cols);
    std::vector<float> host = xs;
    DevTensor dx(xs, n, cols);
    cpu->add(Tensor{host.data(), n, cols}, Tensor{ys.data(), n, cols});
    gpu->add(dx.t, dy.t);
    expect_same_bits(dx.values(), host, "add");
    // add_rmsnorm, its out the addend (as the forward pass has it), whole
    // rows and per head.
    for (const int g : {cols, head}) {
      std::vector<float> hx = xs, hy = ys;
      DevTensor ex(xs, n, cols), ey(ys, n, cols);
      const Tensor tx{hx.data(), n, cols}, ty{hy.data(), n, cols};
      cpu->add_rmsnorm(tx, ty, std::span(w).first(size_t(g)), 1e-5f, ty);
      gpu->add_rmsnorm(ex.t, ey.t, std::span(w).first(size_t(g)), 1e-5f, ey.t);
      expect_same_bits(ex.values(), hx, "add_rmsnorm's sums");
      expect_same_bits(ey.values(), hy, "add_rmsnorm's norm");
    }
  }
  // The activations, with the edges of ops_test's scalar-step test.
  std::vector<float> g = normal(size_t(n) * cols, 5, 6.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {0.0f, -0.0f, 1e-40f, -87.5f, 88.7f, -95.0f, -104.0f, 7.0f, -7.0f, 1e4f, -3e38f, nan};
  for (size_t i = 0; i < std::size(edge); ++i) g[i] = edge[i], ys[i + 20] = edge[i];
  for (FfnAct act : {FfnAct::kSilu, FfnAct::kGeluTanh, FfnAct::kSwigluOai}) {
    std::vector<float> host = g;
    DevTensor dg(g, n, cols), du(ys, n, cols);
    cpu->gated_ffn(act, Tensor{host.data(), n, cols}, Tensor{ys.data(), n, cols});
    gpu->gated_ffn(act, dg.t, du.t);
    expect_same_bits(dg.values(), host, "gated_ffn");
  }
  // RoPE in both styles, positions far apart.
  std::vector<int32_t> pos(n);
  for (int t = 0; t < n; ++t) pos[size_t(t)] = t * 977;
  for (RopeStyle style : {RopeStyle::kAdjacent, RopeStyle::kHalves}) {
    RopeParams p;
    p.rot_dim = head, p.style = style;
    RopeTable table;
    table.build(pos.data(), n, p);
    both("rope", [&](LayerOps& o, Tensor x) { o.rope(x, head, table); });
    // Queries and keys in one launch (keys of fewer heads, as with GQA).
    std::vector<float> hq = xs, hk(ys.begin(), ys.begin() + std::ptrdiff_t(n * 2 * head));
    DevTensor dq(hq, n, cols), dk(hk, n, 2 * head);
    cpu->rope_qk(Tensor{hq.data(), n, cols}, Tensor{hk.data(), n, 2 * head}, head, table);
    gpu->rope_qk(dq.t, dk.t, head, table);
    expect_same_bits(dq.values(), hq, "rope_qk's queries");
    expect_same_bits(dk.values(), hk, "rope_qk's keys");
  }
  // Row copies.
  const std::vector<int> rows = {36, 0, 7, 7};
  std::vector<float> picked(rows.size() * cols);
  DevTensor dx(xs, n, cols), dp(picked, int(rows.size()), cols);
  cpu->copy_rows(Tensor{xs.data(), n, cols}, rows, Tensor{picked.data(), int(rows.size()), cols});
  gpu->copy_rows(dx.t, rows, dp.t);
  expect_same_bits(dp.values(), picked, "copy_rows");
  // A mixture's weighed sums: 4 tokens, 3 rows each, from the 37 rows.
  const std::vector<int> slots = {0, 5, 36, 2, 2, 7, 11, 12, 13, 30, 1, 0};
  const std::vector<float> wts = normal(slots.size(), 8);
  std::vector<float> sum(size_t(4) * cols);
  DevTensor ds(sum, 4, cols);
  cpu->combine(Tensor{xs.data(), n, cols}, slots, wts, 3, Tensor{sum.data(), 4, cols});
  gpu->combine(dx.t, slots, wts, 3, ds.t);
  expect_same_bits(ds.values(), sum, "combine");
}

// The output head: matmul_refined's two levels on the device, the tiles
// near each row's top refined, for the CPU's both paths (up to 4 rows in one
// stacked pass; more, tile by tile): the same logits.
TEST(CudaOps, TheRefinedHeadIsTheCpusBitForBit) {
  REQUIRE_GPU();
  const auto gpu = cuda_backend().ops();
  const auto cpu = cpu_backend().ops();
  std::mt19937 rng(9);
  const int rows = 1000, cols = 512;  // rows: not a whole number of 16-row tiles
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K}) {
    const std::vector<uint8_t> data = random_matrix(type, rows, cols, rng);
    const Weight on_cpu = cpu_backend().matrix(type, rows, cols, data.data());
    const Weight on_gpu = cuda_backend().matrix(type, rows, cols, data.data());
    ASSERT_NE(on_gpu.device, nullptr);
    for (int n_tok : {1, 4, 5, 19}) {
      std::vector<float> x = activations(n_tok, cols, rng), want(size_t(n_tok) * rows);
      cpu->matmul_head(on_cpu, Tensor{x.data(), n_tok, cols}, 8.0f, Tensor{want.data(), n_tok, rows});
      DevTensor dx(x, n_tok, cols), dy(want, n_tok, rows);
      gpu->matmul_head(on_gpu, dx.t, 8.0f, dy.t);
      SCOPED_TRACE(std::string(type_info(uint32_t(type))->name) + ", " + std::to_string(n_tok) + " rows");
      expect_same_bits(dy.values(), want, "head");
      // And a plain matmul of the same weights.
      std::vector<float> plain(size_t(n_tok) * rows);
      cpu->matmul(on_cpu, Tensor{x.data(), n_tok, cols}, Tensor{plain.data(), n_tok, rows});
      gpu->matmul(on_gpu, dx.t, dy.t);
      expect_same_bits(dy.values(), plain, "matmul");
    }
  }
}

// Whole forward passes, every architecture (F32 weights: their matmuls run
// on the host, every other step on the device), the KV on the host: a
// prompt and then a step of two decode rows, the same logits as the CPU.
TEST(CudaOps, EveryArchitecturesForwardPassIsTheCpus) {
  REQUIRE_GPU();
  for (const char* arch : {"llama", "llama3", "qwen2", "qwen3", "gemma3", "qwen3moe", "gpt-oss", "phi3", "mistral3", "smollm3", "granite",
                           "gemma2", "olmo2", "glm4"}) {
    SCOPED_TRACE(arch);
    const std::string path = test::tiny_model(std::string("cudaops_") + arch, test::tiny_arch_shape(arch));
    const auto on_cpu = LlamaModel::load(path);
    const auto on_gpu = LlamaModel::load(path, cuda_backend());
    EXPECT_STREQ(on_gpu->backend().name(), "cuda");
    ContiguousKv kv_cpu(on_cpu->config().kv_shape(), 256), kv_gpu(on_gpu->config().kv_shape(), 256);
    Workspace ws_cpu, ws_gpu;
    Batch prompt;
    for (int t = 0; t < 50; ++t) prompt.add(3 + 7 * t % 200, t, 0, t % 8 == 0 || t == 49);
    std::vector<float> a, b;
    on_cpu->forward(prompt, kv_cpu, ws_cpu, a);
    on_gpu->forward(prompt, kv_gpu, ws_gpu, b);
    expect_same_bits(b, a, "prompt logits");
    Batch step;
    step.add(11, 50, 0, true);
    step.add(12, 51, 0, true);
    on_cpu->forward(step, kv_cpu, ws_cpu, a);
    on_gpu->forward(step, kv_gpu, ws_gpu, b);
    expect_same_bits(b, a, "decode logits");
  }
}


// The KV on the GPU (PrefixKv on the device, attn/cuda_attention.h) under a
// device model: two sequences sharing two chunks of a prompt, then a step of
// both; every path gives the same logits bit for bit, and they are the host
// KV's (the CPU's attention) within the GPU's rounding: probabilities are
// rounded to fp16 for P.V, about 2^-11 of each term, which a tiny model's
// logits (of order 1) carry as a few 1e-3 at most; 2e-2 is allowed.
TEST(CudaOps, TheGpusKvAgreesWithTheHostsAndAcrossPaths) {
  REQUIRE_GPU();
  for (const char* arch : {"llama3", "qwen3", "gemma3", "qwen3moe", "mistral3", "smollm3", "granite", "olmo2"}) {
    SCOPED_TRACE(arch);
    const std::string path = test::tiny_model(std::string("cudaops_") + arch, test::tiny_arch_shape(arch));
    const auto m = LlamaModel::load(path, cuda_backend());
    const LlamaConfig& c = m->config();
    const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, KvType::kF16};
    std::vector<int32_t> prompt;
    for (int t = 0; t < 150; ++t) prompt.push_back(5 + (t * 31) % 180);
    auto run = [&](KvPlace place, AttnPath p) {
      PrefixKv kv(layout, layout.chunk_bytes() * 16, c.n_heads, p, true, place);
      EXPECT_EQ(kv.on_device(), place == KvPlace::kDevice);
      Workspace ws;
      std::vector<float> logits;
      int matched = 0;
      EXPECT_TRUE(kv.join(0, {}, &matched).ok());
      Batch a;
      for (int t = 0; t < 150; ++t) a.add(prompt[size_t(t)], t, 0, false);
      m->forward(a, kv, ws, logits);
      EXPECT_TRUE(kv.join(1, std::span(prompt).first(140), &matched).ok());
      EXPECT_GE(matched, 128);  // two full chunks shared (and the third's first tokens copied)
      Batch b;
      for (int t = matched; t < 170; ++t) b.add(t < 140 ? prompt[size_t(t)] : 7 + t % 50, t, 1, false);
      m->forward(b, kv, ws, logits);
      Batch step;
      step.add(9, 150, 0, true);
      step.add(10, 170, 1, true);
      m->forward(step, kv, ws, logits);
      return logits;
    };
    const std::vector<float> tpp = run(KvPlace::kDevice, AttnPath::kTpp);
    expect_same_bits(run(KvPlace::kDevice, AttnPath::kPerSequence), tpp, "per-sequence");
    expect_same_bits(run(KvPlace::kDevice, AttnPath::kRelay), tpp, "relay");
    const std::vector<float> host = run(KvPlace::kHost, AttnPath::kTpp);
    ASSERT_EQ(host.size(), tpp.size());
    float worst = 0;
    for (size_t i = 0; i < host.size(); ++i) worst = std::max(worst, std::fabs(host[i] - tpp[i]));
    EXPECT_LT(worst, 2e-2f);
    std::printf("%s: the GPU's KV and the host's: logits at most %.2e apart\n", arch, double(worst));
  }
}

// Decode steps with the KV on the GPU, their launches recorded and sent as
// CUDA graphs (base/launch_queue.h), give the logits of launches sent one by
// one, bit for bit, past a chunk boundary (the attention's launches change:
// a graph updated); most steps are one graph replayed.
TEST(CudaOps, DecodeStepsAsCudaGraphsAreTheSame) {
  REQUIRE_GPU();
  test::TinyModelShape shape = test::tiny_arch_shape("llama3");
  shape.matrix_type = 8;  // Q8_0: every matrix on the device
  const auto m = LlamaModel::load(test::tiny_model("cudaops_graphs_q8", shape), cuda_backend());
  const LlamaConfig& c = m->config();
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, KvType::kF16};
  auto decode = [&](bool graphs, cuda::LaunchStats* stats) {
    cuda::set_graphs(graphs);
    PrefixKv kv(layout, layout.chunk_bytes() * 8, c.n_heads, AttnPath::kTpp, true, KvPlace::kDevice);
    Workspace ws;
    std::vector<float> logits, all;
    int matched = 0;
    EXPECT_TRUE(kv.join(0, {}, &matched).ok());
    Batch prompt;
    for (int t = 0; t < 50; ++t) prompt.add(5 + (t * 13) % 170, t, 0, t == 49);
    m->forward(prompt, kv, ws, logits);
    const cuda::LaunchStats before = cuda::launch_stats();
    for (int t = 50; t < 80; ++t) {
      Batch step;
      step.add(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()), t, 0, true);
      m->forward(step, kv, ws, logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    *stats = cuda::launch_stats() - before;
    return all;
  };
  cuda::LaunchStats off, on;
  const std::vector<float> one_by_one = decode(false, &off), graphed = decode(true, &on);
  expect_same_bits(graphed, one_by_one, "decode with CUDA graphs");
  std::printf("30 decode steps: %llu launches, sent at %llu points: %llu replayed, %llu updated, %llu built, %llu "
              "one by one\n",
              (unsigned long long)on.launches, (unsigned long long)on.flushes, (unsigned long long)on.replays,
              (unsigned long long)on.updates, (unsigned long long)on.builds, (unsigned long long)on.direct);
  EXPECT_GT(on.replays, on.builds + on.updates);
}

// The engine on the GPU (tiny model: its F32 matrices on the host, every
// other step and the KV on the device): constrained requests get, batched,
// the tokens they get alone, and match their pattern; Prompt Cache modules
// (pinned chunks on the device, written from the host) serve prompts that
// import them, alone and batched alike, copying nothing.
// A KV pool the GPU cannot hold is an error at start that names the option;
// one that fits leaves the engine's largest step room (it ran at start).
TEST(CudaEngine, OutOfDeviceMemoryIsAnErrorAtStart) {
  REQUIRE_GPU();
  static const auto m = LlamaModel::load(test::tiny_model(), cuda_backend());
  const size_t mib = size_t(1) << 20;
  {
    // All but 256 MiB of the device taken; a pool of 512 MiB cannot be had.
    const size_t free = cuda::memory_info().free;
    ASSERT_GT(free, 1024 * mib);
    cuda::Buffer hog(free - 256 * mib);
    try {
      Engine e(*m, test::engine_options(AttnMode::kTpp, 8, 2, 512 * mib));
      ADD_FAILURE() << "a KV pool larger than the GPU's free memory";
    } catch (const Error& err) {
      std::printf("the start's error: %s\n", err.what());
      EXPECT_EQ(err.kind(), ErrorKind::kNoRoom);
      EXPECT_NE(std::string(err.what()).find("the KV pool (--kv-memory): cannot allocate 512 MiB"), std::string::npos)
          << err.what();
    }
  }
  Engine e(*m, test::engine_options(AttnMode::kTpp, 8, 2, 512 * mib));
  EXPECT_STREQ(e.kv_device(), "cuda");
}

TEST(CudaEngine, ConstrainedRequestsAndPromptCacheModules) {
  REQUIRE_GPU();
  static const auto m = LlamaModel::load(test::tiny_model(), cuda_backend());
  Engine e(*m, test::engine_options(AttnMode::kTpp, 8, 2));
  EXPECT_STREQ(e.kv_device(), "cuda");
  const std::string pattern = "(the|a) (cat|dog) [0-9]{2,4}";
  const auto regex = e.compile_grammar({GrammarKind::kRegex, pattern});
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = m->tokenizer().encode("the cat sat on the mat", false, true);
    r.prompt.push_back(int32_t(260 + i));
    r.max_tokens = 40;
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = uint64_t(i);
    r.grammar = i < 4 ? regex : nullptr;
    reqs.push_back(r);
  }
  const auto alone = test::run_each(e, reqs);
  test::expect_same_tokens(test::run_all(e, reqs), alone, "constrained on the GPU, batched vs alone");
  for (int i = 0; i < 4; ++i) {
    const Completion& c = alone[size_t(i)].completions[0];
    EXPECT_EQ(c.reason, FinishReason::kStop) << c.text;
    EXPECT_TRUE(std::regex_match(c.text, std::regex(pattern))) << c.text;
  }

  const std::string schema = "<schema name=\"s\"><system>" + test::words(70, 1) + "</system><user><module name=\"m\">" +
                             test::words(90, 4) + " <parameter name=\"p\" length=\"24\"/> " + test::words(10, 5) +
                             "</module></user></schema>";
  e.register_schema(pml::parse_schema(schema, "s.xml"));
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  const int pinned = e.stats().kv.pinned;
  EXPECT_GT(pinned, 0);
  std::vector<Request> pr;
  for (const char* p : {"a cat", "the dog sat", "on"}) {
    Request r = e.pml_request(std::string("<prompt schema=\"s\"><m p=\"") + p + "\"/><user>is it on the mat</user></prompt>", true);
    r.max_tokens = 16;
    r.ignore_eos = true;
    pr.push_back(r);
  }
  const auto pml_alone = test::run_each(e, pr);
  test::expect_same_tokens(test::run_all(e, pr), pml_alone, "Prompt Cache on the GPU, batched vs alone");
  ASSERT_TRUE(e.wait_idle(std::chrono::seconds(30)));
  EXPECT_EQ(e.stats().kv.pinned, pinned);
}

}  // namespace
}  // namespace cs
