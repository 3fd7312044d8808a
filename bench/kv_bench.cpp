// Prefix-tree costs (issue 3): join of a 4096-token sequence into a tree
// holding 1000 sequences, leave, and kernel-context rebuild, on the default
// model's KV layout (30 layers x 3 KV heads x 64, c = 64, fp16). Also one
// decode step of the model at batch 32, the yardstick the per-step context
// cost is compared with (skipped when the model file is absent).
#include <benchmark/benchmark.h>

#include <filesystem>

#include "kv/prefix_tree.h"
#include "model/llama.h"

namespace cs {
namespace {

constexpr KvLayout kSmolLayout{30, 3, 64, 64, KvType::kF16};

std::vector<int32_t> tokens(int32_t base, int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = base + i;
  return v;
}

// A tree of n_seqs sequences: a shared 4096-token system prompt, each with
// its own 64-token question. Returns chunks needed.
void fill(PrefixTree& t, int n_seqs) {
  const auto sys = tokens(0, 4096);
  int m;
  for (int s = 0; s < n_seqs; ++s) {
    if (!t.join(s, sys, &m).ok()) std::abort();
    if (m < 4096 && !t.append(s, std::span(sys).subspan(size_t(m))).ok()) std::abort();
    if (!t.append(s, tokens(1000000 + 100 * s, 64)).ok()) std::abort();
  }
}

size_t bytes_for(int n_seqs) { return kSmolLayout.chunk_bytes() * size_t(64 + n_seqs + 4); }

void BM_Join4096Into1000(benchmark::State& state) {
  PrefixTree t(kSmolLayout, bytes_for(1001));
  fill(t, 1000);
  // A new request: the system prompt plus a question: 64 shared chunks found,
  // the question appended.
  auto prompt = tokens(0, 4096);
  const auto q = tokens(9000000, 64);
  SeqId id = 100000;
  for (auto _ : state) {
    int m;
    if (!t.join(id, prompt, &m).ok()) std::abort();
    if (!t.append(id, q).ok()) std::abort();
    state.PauseTiming();
    if (!t.leave(id++).ok()) std::abort();
    t.evict(1 << 20);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Join4096Into1000)->Unit(benchmark::kMicrosecond);

void BM_Leave(benchmark::State& state) {
  PrefixTree t(kSmolLayout, bytes_for(1001));
  fill(t, 1000);
  const auto prompt = tokens(0, 4096), q = tokens(9000000, 64);
  SeqId id = 100000;
  for (auto _ : state) {
    state.PauseTiming();
    int m;
    if (!t.join(id, prompt, &m).ok() || !t.append(id, q).ok()) std::abort();
    state.ResumeTiming();
    if (!t.leave(id++).ok()) std::abort();
  }
}
BENCHMARK(BM_Leave)->Unit(benchmark::kMicrosecond);

// Rebuild after a structural change (here: one sequence leaves and rejoins).
void BM_ContextRebuild(benchmark::State& state) {
  const int n = int(state.range(0));
  PrefixTree t(kSmolLayout, bytes_for(n + 1));
  fill(t, n);
  for (auto _ : state) {
    state.PauseTiming();
    int m;
    if (!t.leave(0).ok() || !t.join(0, tokens(0, 4096), &m).ok()) std::abort();
    state.ResumeTiming();
    benchmark::DoNotOptimize(t.context());
  }
}
BENCHMARK(BM_ContextRebuild)->Arg(32)->Arg(1000)->Unit(benchmark::kMicrosecond);

// A step with no structural change: the published context is reused.
void BM_ContextUnchanged(benchmark::State& state) {
  PrefixTree t(kSmolLayout, bytes_for(33));
  fill(t, 32);
  (void)t.context();
  for (auto _ : state) benchmark::DoNotOptimize(t.context());
}
BENCHMARK(BM_ContextUnchanged);

// One decode step of the default model for 32 sequences (short contexts, so
// this is the smallest, hardest denominator).
void BM_DecodeStepBatch32(benchmark::State& state) {
  if (!std::filesystem::exists(CS_MODEL)) {
    state.SkipWithError("model not present");
    return;
  }
  static auto model = LlamaModel::load(CS_MODEL);
  ContiguousKv kv(model->config().kv_shape(), 4096);
  Workspace ws;
  std::vector<float> logits;
  int pos = 0;
  for (auto _ : state) {
    Batch b;
    for (int s = 0; s < 32; ++s) b.add(100 + s, pos, s, true);
    ++pos;
    model->forward(b, kv, ws, logits);
  }
}
BENCHMARK(BM_DecodeStepBatch32)->Unit(benchmark::kMillisecond)->Iterations(20);

}  // namespace
}  // namespace cs

BENCHMARK_MAIN();
