// Prefix-tree costs (issue 3): join of a 4096-token sequence into a tree
// holding 1000 sequences, leave, and kernel-context rebuild, on the default
// model's KV layout (30 layers x 3 KV heads x 64, c = 64, fp16). Also one
// decode step of the model at batch 32, the yardstick the per-step context
// cost is compared with (skipped when the model file is absent).
#include <benchmark/benchmark.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "attn/attention.h"
#include "attn/block.h"
#include "attn_fixtures.h"
#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"
#include "kv/host_tree.h"
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
void fill(HostTree& t, int n_seqs) {
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
  HostTree t(kSmolLayout, bytes_for(1001));
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
  HostTree t(kSmolLayout, bytes_for(1001));
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
  HostTree t(kSmolLayout, bytes_for(n + 1));
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

// The web console's snapshot of such a tree (what the engine thread spends
// per GET /v1/kv/tree at most every 250 ms): the server's cap, 512 nodes.
void BM_TreeView(benchmark::State& state) {
  const int n = int(state.range(0));
  HostTree t(kSmolLayout, bytes_for(n));
  fill(t, n);
  for (auto _ : state) benchmark::DoNotOptimize(t.view(512, 48));
}
BENCHMARK(BM_TreeView)->Arg(32)->Arg(1000)->Unit(benchmark::kMicrosecond);

// A step with no structural change: the published context is reused.
void BM_ContextUnchanged(benchmark::State& state) {
  HostTree t(kSmolLayout, bytes_for(33));
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

// The output head alone for n rows of real final hidden states (range 0):
// the 8-bit input (range 1 = 0), the refined head the forward pass uses (1),
// every logit refined (2).
void BM_OutputHead(benchmark::State& state) {
  if (!std::filesystem::exists(CS_MODEL)) {
    state.SkipWithError("model not present");
    return;
  }
  static auto model = LlamaModel::load(CS_MODEL);
  static const std::vector<float> hidden = [] {  // 32 rows: a sentence's positions
    const auto ids = model->tokenizer().encode(
        "The prefix tree keeps the key and value chunks of shared prompt text once, and every request that starts "
        "with the same system prompt reads them in place instead of computing them again.", false);
    ContiguousKv kv(model->config().kv_shape(), 256);
    Workspace ws;
    std::vector<float> logits;
    Batch b;
    for (int t = 0; t < 32; ++t) b.add(ids[size_t(t) % ids.size()], t, 0, true);
    model->forward(b, kv, ws, logits);
    const Tensor in = ws.head_in.tensor();
    return std::vector<float>(in.data, in.data + in.size());
  }();
  const Weight& w = model->output();
  const int n = int(state.range(0));
  std::vector<float> y(size_t(n) * w.rows);
  std::vector<BlockQ8> scratch;
  HeadScratch head;
  const float margin = state.range(1) == 1 ? kHeadMargin : INFINITY;
  const size_t cols = size_t(w.cols);
  const int64_t n_tiles = (w.rows + kPackRows - 1) / kPackRows;
  int64_t call = 0, refined = 0;
  for (auto _ : state) {
    // Fewer than 32 rows: each call the next n of the sentence's positions.
    const float* x = hidden.data() + size_t(call++ % (32 / n)) * size_t(n) * cols;
    if (state.range(1)) matmul_refined(w, x, n, margin, y.data(), head), refined += head.level2_pairs;
    else matmul(w, x, n, y.data(), scratch);
    benchmark::DoNotOptimize(y.data());
  }
  // The share of (tile, row) pairs whose level two was computed.
  state.counters["level2"] = double(refined) / double(std::max<int64_t>(call, 1) * n_tiles * n);
}
BENCHMARK(BM_OutputHead)->ArgsProduct({{1, 4, 32}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);

// The workload chunkserve is built for, end to end: one decode step of the
// default model for 32 sequences that share a 2048-token system prompt and
// have 64 tokens of their own. Arg 0: the contiguous per-sequence cache
// (fp16, no sharing; 4: the same in fp32); 1: the chunk cache (fp16) with two-phase partition;
// 2: the chunk cache with per-sequence attention; 3: the chunk cache with
// sharing off (every prompt distinct) and per-sequence attention. K/V are synthetic (the
// timing does not depend on their values), so no prefill is needed.
void BM_DecodeStepSharedPrompt(benchmark::State& state) {
  if (!std::filesystem::exists(CS_MODEL)) {
    state.SkipWithError("model not present");
    return;
  }
  static auto model = LlamaModel::load(CS_MODEL);
  const LlamaConfig& c = model->config();
  const int b = 32, n_s = 2048, n_own = 64, kw = c.n_kv_heads * c.head_dim;
  const int mode = int(state.range(0));
  std::unique_ptr<KvStore> store;
  // Fills a batch's K/V with small synthetic values, layer by layer.
  auto fill = [&](KvStore& kv, const Batch& batch) {
    kv.begin_batch(batch);
    std::vector<float> k(size_t(batch.size()) * kw), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) k[i] = float(int(i % 7) - 3) * 0.1f, v[i] = float(int(i % 5) - 2) * 0.1f;
    for (int l = 0; l < c.n_layers; ++l) kv.store(l, k.data(), v.data());
  };
  if (mode == 0 || mode == 4) {
    store = std::make_unique<ContiguousKv>(c.kv_shape(), n_s + n_own + 64, mode == 0 ? KvType::kF16 : KvType::kF32);
    for (int s = 0; s < b; ++s) {
      Batch batch;
      for (int i = 0; i < n_s + n_own; ++i) batch.add(i < n_s ? 100 + i % 1000 : 5000 + s, i, s, false);
      fill(*store, batch);
    }
  } else {
    const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, KvType::kF16};
    const bool share = mode != 3;
    auto kv = std::make_unique<PrefixKv>(layout, layout.chunk_bytes() * size_t((share ? n_s / 64 : b * n_s / 64) + b * 4 + 8),
                                         c.n_heads, mode == 1 ? AttnPath::kTpp : AttnPath::kPerSequence);

    std::vector<int32_t> sys(static_cast<size_t>(n_s));
    for (int i = 0; i < n_s; ++i) sys[size_t(i)] = 100 + i % 1000;
    for (int s = 0; s < b; ++s) {
      int matched;
      if (!share)
        for (auto& t : sys) t += 1000;  // a different prompt for every sequence
      if (!kv->join(s, sys, &matched).ok()) std::abort();
      Batch batch;
      for (int i = matched; i < n_s + n_own; ++i) batch.add(i < n_s ? sys[size_t(i)] : 40000 + s, i, s, false);
      fill(*kv, batch);
    }
    store = std::move(kv);
  }
  Workspace ws;
  std::vector<float> logits;
  int pos = n_s + n_own;
  for (auto _ : state) {
    Batch d;
    for (int s = 0; s < b; ++s) d.add(7, pos, s, true);
    ++pos;
    model->forward(d, *store, ws, logits);
  }
  state.counters["tokens/s"] = benchmark::Counter(double(b), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeStepSharedPrompt)->Arg(4)->Arg(0)->Arg(3)->Arg(2)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(10);

// Table 3's heaviest cell alone (b=32, h=32, d=128, c=64, fp16, n_p = n_s =
// 4096): arg 0 per-sequence on the shared chunks, 1 two-phase partition,
// 2 relay. Reports GFLOP/s (4 b h n d per call).
void BM_AttentionSharedCell(benchmark::State& state) {
  static bench::SharedCell cell(32, 32, 4096);
  const AttnProblem p = cell.problem();
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0: attn_per_sequence(p); break;
      case 1: attn_tpp(p); break;
      default: attn_relay(p); break;
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(cell.flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionSharedCell)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// The block kernel alone on one cache-resident fp16 chunk (c = 64, d = 128):
// nq query rows, the compute ceiling TPP's phase one can reach per chunk.
// Every call starts from empty states, so o is also rescaled (by 0).
void BM_BlockUpdate(benchmark::State& state) {
  bench::BlockFixture f(int(state.range(0)), KvType::kF16);
  for (auto _ : state) {
    std::fill(f.m.begin(), f.m.end(), -std::numeric_limits<float>::infinity());
    std::fill(f.l.begin(), f.l.end(), 0.0f);
    block_update(f.job);
    benchmark::DoNotOptimize(f.o.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(f.flops(), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_BlockUpdate)->Arg(1)->Arg(4)->Arg(8)->Arg(32)->Arg(64);

}  // namespace
}  // namespace cs

BENCHMARK_MAIN();
