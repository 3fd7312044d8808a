// `chunkserve bench attention --device cuda`: the papers' kernel tables on
// the GPU (attn/cuda_attention.h), the shapes of the CPU tables:
//  - ChunkAttention Table 3: b=32, h=32, d=128, c=64, fp16 K/V, n_p in
//    {1024, 2048, 4096}, n_s in {0, n_p/2, 3n_p/4, n_p}: median microseconds
//    of one decode-step attention call for per-sequence without sharing,
//    per-sequence on shared chunks, two-phase partition and relay, beside the
//    bytes-once bound: the K/V the call must read, once, at the device's copy
//    bandwidth measured in the same run.
//  - Figure 4: token rate vs batch (n_s = 2048, n_c = 64); Figure 3: as the
//    private tokens n_c grow (b = 32, n_s = 2048); RelayAttention Eq. 10.
// Every timed call starts with the L2 cache flushed (a read of 4x its size,
// untimed): a decode step's attention of one layer finds the K/V that the
// other layers read since in memory, not in L2. Calls of a cell are timed in
// the same rounds, in rotating order; CUDA events, the device kept busy while
// the host queues each call; the median is reported.
// The plan is uploaded once per batch (every layer reuses it) and is not in
// the times; its size and upload time are reported apart.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "attn/cuda_attention.h"
#include "kv/host_tree.h"
#include "attn/plan.h"
#include "base/cuda.h"
#include "base/error.h"
#include "base/f16.h"
#include "cli/bench_attention_cuda.h"
#include "cli/bench_tree.h"
#include "cli/cold_call.h"
#include "kv/device_kv_memory.h"

namespace cs {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Medians (us) of calls timed against each other: a warm-up each, then
// `reps` rounds, each call once per round, the order rotating.
std::vector<double> interleaved_us(const std::vector<std::function<void()>>& fns, int reps, Flusher& flush) {
  const size_t n = fns.size();
  std::vector<std::vector<double>> t(n);
  cuda::Timer timer;
  for (const auto& f : fns) f();
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + size_t(r)) % n;
      flush();
      timer.start();
      fns[i]();
      timer.stop();
      t[i].push_back(timer.microseconds());
    }
  std::vector<double> us(n);
  for (size_t i = 0; i < n; ++i) us[i] = median(t[i]);
  return us;
}

// Device-to-device copy bandwidth, bytes read plus written per second.
double copy_gbs(Flusher& flush) {
  const size_t bytes = size_t(1) << 30;
  cuda::Buffer a(bytes), b(bytes);
  cuda::memset_device(a.get(), 1, bytes);
  const double us = interleaved_us({[&] { cuda::device_copy(b.get(), a.get(), bytes); }}, 20, flush)[0];
  return 2.0 * double(bytes) / us / 1e3;
}

// b sequences of n_s shared + n_p - n_s private tokens (all private when
// !share): the tree's bookkeeping on the host, the K/V (random fp16) on the
// device, a plan and an uploaded tile plan per path.
struct World {
  std::unique_ptr<HostTree> tree;
  AttnPlan plan;
  std::unique_ptr<DeviceKvMemory> kv;
  std::unique_ptr<CudaAttention> per, tpp, relay;
  int tpp_shared_tiles = 0;
};

std::unique_ptr<CudaAttention> attention(World& w, AttnPath path, int window_keys, int stages, bool no_merge = false,
                                         int max_rows = 0) {
  CudaAttention::Options opt;
  opt.decode_stages = stages;
  opt.no_merge = no_merge;
  auto a = std::make_unique<CudaAttention>(opt);
  const TilePlan t = plan_tiles(w.plan, path, TileOptions{window_keys, max_rows});
  if (path == AttnPath::kTpp) w.tpp_shared_tiles = t.shared_tiles;
  a->set_plan(t);
  return a;
}

World build(const CudaBenchOptions& o, int b, int n_s, int n_p, bool share, int window_keys) {
  const KvLayout L{1, o.heads, o.dim, o.chunk, KvType::kF16};
  World w;
  w.tree = shared_prompt_tree(L, b, n_s, n_p, share);
  w.plan = plan_attention(w.tree->plan_input(), {}, o.heads);
  w.kv = std::make_unique<DeviceKvMemory>(L, w.tree->pool().capacity());
  // Random values in one chunk, copied on the device into every chunk used.
  std::vector<uint16_t> noise(L.chunk_bytes() / 2);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& h : noise) h = f32_to_f16(nd(rng));
  std::vector<char> done(size_t(w.kv->capacity()), 0);
  ChunkId first = kNoChunk;
  for (ChunkId c : w.plan.chunk) {
    if (done[size_t(c)]) continue;
    done[size_t(c)] = 1;
    if (first == kNoChunk) {
      first = c;
      w.kv->write_chunk(c, reinterpret_cast<const uint8_t*>(noise.data()));
    } else {
      uint8_t* base = const_cast<uint8_t*>(w.kv->base());
      cuda::device_copy(base + size_t(c) * L.chunk_bytes(), base + size_t(first) * L.chunk_bytes(), L.chunk_bytes());
    }
  }
  w.per = attention(w, AttnPath::kPerSequence, window_keys, o.decode_stages);
  w.tpp = attention(w, AttnPath::kTpp, window_keys, o.decode_stages);
  w.relay = attention(w, AttnPath::kRelay, window_keys, o.decode_stages);
  cuda::synchronize();
  return w;
}

struct Io {
  cuda::Buffer q, out;
};
Io queries(const CudaBenchOptions& o, int b) {
  std::vector<float> q(size_t(b) * o.heads * o.dim);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& x : q) x = nd(rng);
  Io io{cuda::Buffer(q.size() * 4), cuda::Buffer(q.size() * 4)};
  cuda::to_device(io.q.get(), q.data(), q.size() * 4);
  return io;
}

std::function<void()> call(const World& w, const CudaAttention& a, const Io& io) {
  CudaAttention* ap = const_cast<CudaAttention*>(&a);
  const DeviceKvMemory* kv = w.kv.get();
  const float* q = io.q.as<float>();
  float* out = io.out.as<float>();
  return [ap, kv, q, out] { ap->run(*kv, 0, q, out); };
}

}  // namespace

int run_bench_attention_cuda(const CudaBenchOptions& o) {
  std::string why;
  if (!cuda::device_available(&why)) throw Error("bench attention --device cuda: " + why);
  // Each call's kernels launched one by one, as the tables of issue 42 and
  // PyTorch's calls beside them are (a graph would change what is compared).
  cuda::set_graphs(false);
  const cuda::DeviceInfo dev = cuda::device_info();
  Flusher flush(dev.l2_bytes);
  nlohmann::json js;
  const double bw = copy_gbs(flush);
  std::printf("Device: %s, %d SMs, %.0f GiB, L2 %.0f MiB; device-to-device copy %.0f GB/s (read + written)\n\n",
              dev.name.c_str(), dev.sm_count, double(dev.memory_bytes) / (1 << 30), double(dev.l2_bytes) / (1 << 20),
              bw);
  js["device"] = {{"name", dev.name}, {"sms", dev.sm_count}, {"copy_gbs", bw}};
  const int b = o.batch, wk = o.window_keys;
  auto bound_us = [&](int bb, int n_s, int n_p) {
    return (double(n_s) + double(bb) * (n_p - n_s)) * o.heads * o.dim * 2 * 2 / (bw * 1e3);
  };
  const std::vector<int> nps = !o.nps.empty() ? o.nps : o.quick ? std::vector<int>{256} : std::vector<int>{1024, 2048, 4096};

  std::printf("### ChunkAttention Table 3 on the GPU (b=%d, h=%d, d=%d, c=%d, fp16 K/V, windows of %d keys; median us "
              "per call, L2 flushed)\n\n",
              b, o.heads, o.dim, o.chunk, wk);
  std::printf("| n_p | n_s | per-seq (no sharing) | per-seq (shared chunks) | TPP | relay | bytes-once bound | "
              "TPP vs per-seq no-share | bound / TPP |\n|---|---|---|---|---|---|---|---|---|\n");
  const Io io = queries(o, b);
  for (int n_p : nps) {
    const World alone = build(o, b, 0, n_p, false, wk);
    for (int n_s : table3_shared(n_p, o.shared_fractions)) {
      const World w = build(o, b, n_s, n_p, true, wk);
      const auto us = interleaved_us({call(alone, *alone.per, io), call(w, *w.per, io), call(w, *w.tpp, io),
                                      call(w, *w.relay, io)},
                                     o.reps, flush);
      const double bound = bound_us(b, n_s, n_p);
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx | %.0f%% |\n", n_p, n_s, us[0], us[1], us[2],
                  us[3], bound, us[0] / us[2], 100 * bound / us[2]);
      std::fflush(stdout);
      js["table3"].push_back({{"n_p", n_p}, {"n_s", n_s}, {"per_seq_noshare_us", us[0]}, {"per_seq_shared_us", us[1]},
                              {"tpp_us", us[2]}, {"relay_us", us[3]}, {"bound_us", bound},
                              {"tpp_shared_tiles", w.tpp_shared_tiles}});
    }
  }
  if (o.table3_only) {
    if (!o.json.empty()) std::ofstream(o.json) << js.dump(1) << "\n";
    return 0;
  }

  // Windows (the keys one tile reads, against the partial states it leaves)
  // and the pipeline depth of the 16-row tiles, timed in the same rounds.
  if (!o.quick) {
    struct Variant {
      int keys, rows, stages;
    };
    // stages 0: the default, by the plan (CudaAttention::Options::decode_stages).
    const std::vector<Variant> variants{{512, 32, 0}, {512, 32, 2}, {512, 32, 3}, {512, 16, 0},
                                        {1024, 32, 0}, {1024, 16, 0}, {256, 32, 0}};
    std::printf("\n### Tile windows, rows and the 16-row tiles' stages (b=%d): TPP median us\n\n"
                "| window keys | rows per tile | stages | n_p=1024 n_s=0 | n_p=4096 n_s=0 | n_s=2048 | n_s=3072 | "
                "n_s=4096 |\n|---|---|---|---|---|---|---|---|\n",
                b);
    std::vector<std::vector<double>> cols;
    for (const auto& [n_s, n_p] : {std::pair{0, 1024}, {0, 4096}, {2048, 4096}, {3072, 4096}, {4096, 4096}}) {
      World w = build(o, b, n_s, n_p, true, wk);
      std::vector<std::unique_ptr<CudaAttention>> as;
      std::vector<std::function<void()>> fns;
      for (const Variant& v : variants) {
        as.push_back(attention(w, AttnPath::kTpp, v.keys, v.stages, false, v.rows));
        fns.push_back(call(w, *as.back(), io));
      }
      cols.push_back(interleaved_us(fns, o.reps, flush));
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      const std::string stages = variants[v].stages ? std::to_string(variants[v].stages) : "by plan";
      std::printf("| %d | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", variants[v].keys, variants[v].rows,
                  stages.c_str(), cols[0][v], cols[1][v], cols[2][v], cols[3][v], cols[4][v]);
      js["windows"].push_back({{"window_keys", variants[v].keys}, {"rows", variants[v].rows}, {"stages", variants[v].stages},
                               {"p1024_ns0_us", cols[0][v]}, {"ns0_us", cols[1][v]},
                               {"ns2048_us", cols[2][v]}, {"ns3072_us", cols[3][v]}, {"ns4096_us", cols[4][v]}});
    }
    std::fflush(stdout);

    // Where TPP's time goes: the same call with its merges left out (the
    // tiles alone; results wrong), timed in the same rounds.
    std::printf("\n### TPP's merges (b=%d, n_p=4096, windows of %d keys): median us\n\n"
                "| n_s | TPP | tiles alone (no merge) | merges |\n|---|---|---|---|\n",
                b, wk);
    for (int n_s : {0, 2048, 3072, 4096}) {
      World w = build(o, b, n_s, 4096, true, wk);
      const auto bare = attention(w, AttnPath::kTpp, wk, o.decode_stages, true);
      const auto us = interleaved_us({call(w, *w.tpp, io), call(w, *bare, io)}, o.reps, flush);
      std::printf("| %d | %.1f | %.1f | %.1f |\n", n_s, us[0], us[1], us[0] - us[1]);
      js["merges"].push_back({{"n_s", n_s}, {"tpp_us", us[0]}, {"tiles_us", us[1]}});
    }
    std::fflush(stdout);
  }

  const int n_s = o.quick ? 128 : 2048, n_c = 64;
  std::printf("\n### ChunkAttention Figure 4 on the GPU (n_s=%d, n_c=%d): attention token rate, K tokens/s\n\n", n_s, n_c);
  std::printf("| batch | per-seq (no sharing) | per-seq (shared) | TPP | TPP vs per-seq no-share | bound |\n|---|---|---|---|---|---|\n");
  const std::vector<int> batches = o.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 4, 8, 16, 32, 48, 64, 96};
  for (int bb : batches) {
    const Io iob = queries(o, bb);
    const World alone = build(o, bb, 0, n_s + n_c, false, wk), w = build(o, bb, n_s, n_s + n_c, true, wk);
    const auto us = interleaved_us({call(alone, *alone.per, iob), call(w, *w.per, iob), call(w, *w.tpp, iob)}, o.reps, flush);
    std::printf("| %d | %.0f | %.0f | %.0f | %.2fx | %.0f |\n", bb, bb / us[0] * 1e3, bb / us[1] * 1e3, bb / us[2] * 1e3,
                us[0] / us[2], bb / bound_us(bb, n_s, n_s + n_c) * 1e3);
    std::fflush(stdout);
    js["figure4"].push_back({{"batch", bb}, {"per_seq_noshare_us", us[0]}, {"per_seq_shared_us", us[1]}, {"tpp_us", us[2]}});
  }

  std::printf("\n### ChunkAttention Figure 3 on the GPU (b=%d, n_s=%d): attention token rate as n_c grows, K tokens/s\n\n", b, n_s);
  std::printf("| n_c | per-seq (no sharing) | per-seq (shared) | TPP | TPP vs per-seq no-share | bound |\n|---|---|---|---|---|---|\n");
  const std::vector<int> ncs = o.quick ? std::vector<int>{64} : std::vector<int>{64, 512, 1024, 2048};
  for (int nc : ncs) {
    const World alone = build(o, b, 0, n_s + nc, false, wk), w = build(o, b, n_s, n_s + nc, true, wk);
    const auto us = interleaved_us({call(alone, *alone.per, io), call(w, *w.per, io), call(w, *w.tpp, io)}, o.reps, flush);
    std::printf("| %d | %.0f | %.0f | %.0f | %.2fx | %.0f |\n", nc, b / us[0] * 1e3, b / us[1] * 1e3, b / us[2] * 1e3,
                us[0] / us[2], b / bound_us(b, n_s, n_s + nc) * 1e3);
    std::fflush(stdout);
    js["figure3"].push_back({{"n_c", nc}, {"per_seq_noshare_us", us[0]}, {"per_seq_shared_us", us[1]}, {"tpp_us", us[2]}});
  }

  const int ctxlen = o.quick ? 64 : 128;
  std::printf("\n### RelayAttention Eq. 10 on the GPU (b=%d, request context %d): relay over per-sequence (no sharing)\n\n", b, ctxlen);
  std::printf("| system prompt s | theoretical | measured | relay us | TPP us | per-seq us |\n|---|---|---|---|---|---|\n");
  const std::vector<int> ss = o.quick ? std::vector<int>{128} : std::vector<int>{256, 512, 1024, 2048, 4096};
  for (int s : ss) {
    const World alone = build(o, b, 0, s + ctxlen, false, wk), w = build(o, b, s, s + ctxlen, true, wk);
    const auto us = interleaved_us({call(alone, *alone.per, io), call(w, *w.relay, io), call(w, *w.tpp, io)}, o.reps, flush);
    const double theory = (s + ctxlen + 2.0) / (double(s) / b + ctxlen + 7.0);
    std::printf("| %d | %.2fx | %.2fx | %.1f | %.1f | %.1f |\n", s, theory, us[0] / us[1], us[1], us[2], us[0]);
    std::fflush(stdout);
    js["relay_eq10"].push_back({{"s", s}, {"theoretical", theory}, {"measured", us[0] / us[1]}, {"relay_us", us[1]},
                                {"tpp_us", us[2]}, {"per_seq_us", us[0]}});
  }
  if (!o.json.empty()) std::ofstream(o.json) << js.dump(1) << "\n";
  return 0;
}

}  // namespace cs
