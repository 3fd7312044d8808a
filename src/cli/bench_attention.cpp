// `chunkserve bench attention`: the papers' kernel tables on this CPU.
//  - ChunkAttention Table 3: b=32, h=32, d=128, c=64, fp16 K/V, n_p in
//    {1024, 2048, 4096}, n_s in {0, n_p/2, 3n_p/4, n_p}: median microseconds of
//    one decode-step attention call for reference-contiguous, per-sequence
//    without sharing, per-sequence on shared chunks, TPP and relay.
//  - Figure 4: token rate vs batch size (n_s = 2048, n_c = 64).
//  - Figure 3: token rate as private completion tokens n_c grow (n_s = 2048).
//  - RelayAttention Eq. 10: theoretical vs measured speedup over system-prompt
//    length (b = 32, 128 request-specific tokens).
// The roofline (memory read GB/s, fp32 GFLOP/s) is measured first and each
// TPP cell reports the fraction of its roofline bound it reaches (the fp32
// peak being the highest FMA probe so far, so a slow probe cannot inflate
// it), and, when compute-bound, the median ratio to a probe run beside each
// timed call.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <random>

#include "attn/attention.h"
#include "kv/host_tree.h"
#include "attn/block.h"
#include "base/error.h"
#include "base/f16.h"
#include "cli/bench_attention_cuda.h"
#include "cli/bench_tree.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/roofline.h"

namespace cs {
namespace {

struct Opts {
  int reps = 0, threads = 0, heads = 32, dim = 128, chunk = 64, batch = 32;
  bool quick = false, table3_only = false;
  std::vector<int> nps, shared_fractions;
  std::string json;
  std::string device = "cpu";
  int window_keys = 512;
  int decode_stages = 0;
  float softcap = 0;  // > 0: Table 3 also times TPP with Gemma 2's soft-capped scores
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times calls against each other: one warm-up each, then `reps` rounds in
// which every call runs once, in an order that rotates from round to round;
// returns each call's median microseconds. This host's neighbours slow it in
// spells of seconds, so columns timed in the same rounds share the spells and
// their ratios hold, where columns timed one after the other did not (two
// runs of the very same code once differed by 16%). `after[i](seconds)`, if
// given, runs after each timed call of fns[i], outside its timing.
std::vector<double> interleaved_us(const std::vector<std::function<void()>>& fns, int reps,
                                   const std::vector<std::function<void(double)>>& after = {}) {
  const size_t n = fns.size();
  std::vector<std::vector<double>> t(n);
  for (const auto& f : fns) f();
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (k + size_t(r)) % n;
      const auto t0 = std::chrono::steady_clock::now();
      fns[i]();
      t[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (i < after.size() && after[i]) after[i](t[i].back());
    }
  std::vector<double> us(n);
  for (size_t i = 0; i < n; ++i) us[i] = median(t[i]) * 1e6;
  return us;
}

// One call timed alone: a warm-up, then the median of `reps` timed calls.
double median_us(const std::function<void()>& fn, int reps) { return interleaved_us({fn}, reps)[0]; }

// b sequences of n_s shared + n_p - n_s private tokens (all private when
// !share), K/V filled with random fp16 values.
struct World {
  std::unique_ptr<HostTree> tree;
  AttnPlan plan;  // one decode row per sequence
  std::unique_ptr<AttnWorkspace> ws = std::make_unique<AttnWorkspace>();
};

World build(const Opts& o, int b, int n_s, int n_p, bool share) {
  const KvLayout L{1, o.heads, o.dim, o.chunk, KvType::kF16};
  World w;
  w.tree = shared_prompt_tree(L, b, n_s, n_p, share);
  w.plan = plan_attention(w.tree->plan_input(), {}, o.heads);
  static std::vector<uint16_t> noise;
  if (noise.size() != L.chunk_bytes() / 2) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    noise.resize(L.chunk_bytes() / 2);
    for (auto& h : noise) h = f32_to_f16(nd(rng));
  }
  std::vector<char> done(size_t(w.tree->pool().capacity()), 0);
  for (ChunkId c : w.plan.chunk)
    if (!done[size_t(c)]) {
      done[size_t(c)] = 1;
      std::memcpy(w.tree->pool().data(c), noise.data(), L.chunk_bytes());
    }
  return w;
}

std::vector<float> queries(const Opts& o, int b) {
  std::vector<float> q(size_t(b) * o.heads * o.dim);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& x : q) x = nd(rng);
  return q;
}

AttnProblem problem(const World& w, const std::vector<float>& q, std::vector<float>& out) {
  out.resize(q.size());
  return {&w.tree->pool(), &w.plan, 0, q.data(), out.data(), w.ws.get()};
}

// A call of one attention path on a world (its problem captured by value),
// scores soft-capped at `softcap` when it is not 0 (Gemma 2).
std::function<void()> call(const World& w, const std::vector<float>& q, std::vector<float>& out,
                           void (*path)(const AttnProblem&), float softcap = 0) {
  AttnProblem p = problem(w, q, out);
  p.softcap = softcap;
  return [p, path] { path(p); };
}

void tpp_default(const AttnProblem& p) { attn_tpp(p); }

// Reference-contiguous: each sequence's K^T and V in one dense fp16 buffer per
// head (no chunks, no sharing), the same block kernel walking it 64 keys at a time.
double time_contiguous(const Opts& o, int b, int n, const std::vector<float>& q) {
  const size_t per = size_t(n) * o.dim;
  std::vector<uint16_t> kv(size_t(b) * o.heads * per * 2);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = f32_to_f16(float(int(i * 2654435761u % 2001) - 1000) / 500);
  std::vector<float> out(q.size());
  return median_us(
      [&] {
#pragma omp parallel
        {
          std::vector<float> acc(size_t(o.dim)), m(1), l(1);
          std::vector<int> limit(1);
#pragma omp for schedule(static) collapse(2)
          for (int h = 0; h < o.heads; ++h)
            for (int s = 0; s < b; ++s) {
              const uint16_t* base = kv.data() + (size_t(s) * o.heads + h) * per * 2;
              std::fill(acc.begin(), acc.end(), 0.0f);
              m[0] = -INFINITY;
              l[0] = 0;
              for (int t0 = 0; t0 < n; t0 += 64) {
                limit[0] = std::min(64, n - t0);
                BlockJob j;
                j.q = q.data() + (size_t(s) * o.heads + h) * o.dim;
                j.q_stride = o.dim;
                j.nq = 1;
                j.kt = reinterpret_cast<const uint8_t*>(base + t0);
                j.v = reinterpret_cast<const uint8_t*>(base + per + size_t(t0) * o.dim);
                j.kv_type = 1;
                j.c = n;
                j.d = o.dim;
                j.limit = limit.data();
                j.scale = 1.0f / std::sqrt(float(o.dim));
                j.o = acc.data();
                j.o_stride = o.dim;
                j.m = m.data();
                j.l = l.data();
                block_update(j);
              }
              for (int i = 0; i < o.dim; ++i) out[(size_t(s) * o.heads + h) * o.dim + size_t(i)] = acc[size_t(i)] / l[0];
            }
        }
      },
      o.reps);
}

// Per-sequence without sharing, per-sequence on shared chunks, two-phase
// partition, timed in the same rounds; b sequences, n_s shared + n_c own tokens.
struct Trio {
  double noshare, per, tpp;
};
Trio time_trio(const Opts& o, int b, int n_s, int n_c, const std::vector<float>& q, std::vector<float>& out) {
  const World alone = build(o, b, 0, n_s + n_c, false), shared = build(o, b, n_s, n_s + n_c, true);
  const auto us = interleaved_us({call(alone, q, out, attn_per_sequence), call(shared, q, out, attn_per_sequence),
                                  call(shared, q, out, tpp_default)},
                                 o.reps);
  return {us[0], us[1], us[2]};
}

int run(const Opts& given) {
  Opts o = given;
  if (o.reps == 0) o.reps = o.device == "cuda" ? 50 : 7;  // CUDA events are cheap: 50 timings per call
  if (o.device == "cuda") {
    if (o.softcap > 0 || o.dim != 128 || o.heads != 32)
      throw Error("bench attention: --dim, --heads and --softcap time the CPU's kernels (the GPU tables keep the papers' shape)");
    CudaBenchOptions c;
    c.reps = o.reps;
    c.batch = o.batch;
    c.window_keys = o.window_keys;
    c.decode_stages = o.decode_stages;
    c.quick = o.quick;
    c.table3_only = o.table3_only;
    c.nps = o.nps;
    c.shared_fractions = o.shared_fractions;
    c.json = o.json;
    return run_bench_attention_cuda(c);
  }
  set_threads(o.threads);
  nlohmann::json js;
  const Roofline roof = measure_roofline();
  std::printf("Roofline: memory read %.1f GB/s, fp32 %.1f GFLOP/s (%d threads)\n\n", roof.read_gbs,
              roof.fp32_gflops, omp_get_max_threads());
  js["roofline"] = {{"read_gbs", roof.read_gbs}, {"fp32_gflops", roof.fp32_gflops}};
  const int b = o.batch;
  std::vector<float> out;
  const std::vector<int> nps = !o.nps.empty() ? o.nps : o.quick ? std::vector<int>{256} : std::vector<int>{1024, 2048, 4096};

  // Table 3.
  std::printf("### ChunkAttention Table 3 (b=%d, h=%d, d=%d, c=%d, fp16 K/V; median us per call)\n\n", b,
              o.heads, o.dim, o.chunk);
  std::printf("| n_p | n_s | contiguous | per-seq (no sharing) | per-seq (shared chunks) | TPP | relay | "
              "TPP vs per-seq no-share | TPP vs per-seq shared | TPP roofline | TPP vs paired FMA peak |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  const auto q = queries(o, b);
  // The fp32 peak the fractions are taken of: the start-of-run probe, raised
  // by every paired probe that reads higher. A probe that ran during a noisy
  // spell (this host's neighbours at times halve it) then cannot inflate a
  // cell's fraction; the fraction only errs low.
  double peak = roof.fp32_gflops;
  std::string capped_rows;  // --softcap: TPP with and without, from the same rounds
  for (int n_p : nps) {
    const double contiguous = time_contiguous(o, b, n_p, q);
    const World alone = build(o, b, 0, n_p, false);
    for (int n_s : table3_shared(n_p, o.shared_fractions)) {
      const World w = build(o, b, n_s, n_p, true);
      const double flops = 4.0 * b * o.heads * double(n_p) * o.dim;
      const double bytes = (double(n_s) + double(b) * (n_p - n_s)) * o.heads * o.dim * 2 * 2;
      const double byte_us = bytes / (roof.read_gbs * 1e3);
      const bool compute = flops / (peak * 1e3) > byte_us;
      // Compute-bound cells also pair each timed call with an FMA probe of
      // about its length, run right after it. This host's speed drifts by up
      // to +-30% within seconds (neighbours on the same cores), so a peak read
      // at start and a kernel timed a minute later are not like with like; a
      // pair taken together is. The cell reports the median pair's ratio.
      std::vector<double> fractions;
      std::function<void(double)> pair = nullptr;
      if (compute)
        pair = [&](double t) {
          const double probe = fma_probe_gflops(std::max(100000L, long(t * 4e8)));
          peak = std::max(peak, probe);
          fractions.push_back(flops / t / 1e9 / probe);
        };
      std::vector<std::function<void()>> calls = {call(alone, q, out, attn_per_sequence),
                                                  call(w, q, out, attn_per_sequence), call(w, q, out, tpp_default),
                                                  call(w, q, out, attn_relay)};
      if (o.softcap > 0) calls.push_back(call(w, q, out, tpp_default, o.softcap));
      const auto us = interleaved_us(calls, o.reps, {nullptr, nullptr, pair});
      const double noshare = us[0], per = us[1], tpp = us[2], relay = us[3];
      if (o.softcap > 0) {
        char row[128];
        std::snprintf(row, sizeof row, "| %d | %d | %.0f | %.0f | %+.1f%% |\n", n_p, n_s, tpp, us[4], 100 * (us[4] / tpp - 1));
        capped_rows += row;
        js["softcap"].push_back({{"n_p", n_p}, {"n_s", n_s}, {"tpp_us", tpp}, {"tpp_softcap_us", us[4]}});
      }
      const double bound_us = std::max(flops / (peak * 1e3), byte_us);
      const double paired = compute ? median(fractions) : 0;
      char paired_txt[32] = "-";
      if (compute) std::snprintf(paired_txt, sizeof paired_txt, "%.0f%%", 100 * paired);
      std::printf("| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.0f%% (%s-bound; %.0f GFLOP/s) | %s |\n",
                  n_p, n_s, contiguous, noshare, per, tpp, relay, noshare / tpp, per / tpp, 100 * bound_us / tpp,
                  compute ? "compute" : "memory", flops / tpp / 1e3, paired_txt);
      js["table3"].push_back({{"n_p", n_p}, {"n_s", n_s}, {"contiguous_us", contiguous},
                              {"per_seq_noshare_us", noshare}, {"per_seq_shared_us", per},
                              {"tpp_us", tpp}, {"relay_us", relay}, {"tpp_roofline_fraction", bound_us / tpp},
                              {"tpp_gflops", flops / tpp / 1e3}});
      if (compute) js["table3"].back()["tpp_paired_peak_fraction"] = paired;
    }
  }

  std::printf("\nfp32 peak the fractions use: %.1f GFLOP/s (highest FMA probe so far)\n", peak);
  if (o.softcap > 0)
    std::printf("\n### TPP with scores soft-capped at %g (Gemma 2), same rounds (median us per call)\n\n"
                "| n_p | n_s | TPP | TPP soft-capped | cost |\n|---|---|---|---|---|\n%s",
                double(o.softcap), capped_rows.c_str());
  js["fp32_peak_used_gflops"] = peak;
  if (o.table3_only) {
    if (!o.json.empty()) std::ofstream(o.json) << js.dump(1) << "\n";
    return 0;
  }
  // Figure 4: token rate (sequences per second of attention) vs batch.
  const int n_s = o.quick ? 128 : 2048, n_c = 64;
  std::printf("\n### ChunkAttention Figure 4 (n_s=%d, n_c=%d): attention token rate, K tokens/s\n\n", n_s, n_c);
  std::printf("| batch | per-seq (no sharing) | per-seq (shared) | TPP | TPP vs per-seq shared |\n|---|---|---|---|---|\n");
  const std::vector<int> batches = o.quick ? std::vector<int>{1, 8} : std::vector<int>{1, 4, 8, 16, 32, 48, 64, 96};
  for (int bb : batches) {
    const Trio t = time_trio(o, bb, n_s, n_c, queries(o, bb), out);
    std::printf("| %d | %.1f | %.1f | %.1f | %.2fx |\n", bb, bb / t.noshare * 1e3, bb / t.per * 1e3, bb / t.tpp * 1e3,
                t.per / t.tpp);
    js["figure4"].push_back({{"batch", bb}, {"per_seq_noshare_us", t.noshare}, {"per_seq_shared_us", t.per}, {"tpp_us", t.tpp}});
  }

  // Figure 3: as sequences diverge (n_c private tokens each).
  std::printf("\n### ChunkAttention Figure 3 (b=%d, n_s=%d): attention token rate as n_c grows, K tokens/s\n\n", b, n_s);
  std::printf("| n_c | per-seq (no sharing) | per-seq (shared) | TPP | TPP vs per-seq no-share | TPP vs per-seq shared |\n|---|---|---|---|---|---|\n");
  const std::vector<int> ncs = o.quick ? std::vector<int>{64} : std::vector<int>{64, 512, 1024, 2048};
  for (int nc : ncs) {
    const Trio t = time_trio(o, b, n_s, nc, q, out);
    std::printf("| %d | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n", nc, b / t.noshare * 1e3, b / t.per * 1e3, b / t.tpp * 1e3,
                t.noshare / t.tpp, t.per / t.tpp);
    js["figure3"].push_back({{"n_c", nc}, {"per_seq_noshare_us", t.noshare}, {"per_seq_shared_us", t.per}, {"tpp_us", t.tpp}});
  }

  // RelayAttention Eq. 10: p = (s + c + 2) / (s / b + c + 7), against
  // per-sequence attention over unshared KV (what an engine without prefix
  // sharing does).
  const int ctxlen = o.quick ? 64 : 128;
  std::printf("\n### RelayAttention Eq. 10 (b=%d, request context %d): speedup of relay over per-sequence (no sharing)\n\n", b, ctxlen);
  std::printf("| system prompt s | theoretical | measured | relay us | per-seq us |\n|---|---|---|---|---|\n");
  const std::vector<int> ss = o.quick ? std::vector<int>{128} : std::vector<int>{256, 512, 1024, 2048, 4096};
  for (int s : ss) {
    const World alone = build(o, b, 0, s + ctxlen, false), w = build(o, b, s, s + ctxlen, true);
    const auto us = interleaved_us({call(alone, q, out, attn_per_sequence), call(w, q, out, attn_relay)}, o.reps);
    const double noshare = us[0], relay = us[1];
    const double theory = (s + ctxlen + 2.0) / (double(s) / b + ctxlen + 7.0);
    std::printf("| %d | %.2fx | %.2fx | %.0f | %.0f |\n", s, theory, noshare / relay, relay, noshare);
    js["relay_eq10"].push_back({{"s", s}, {"theoretical", theory}, {"measured", noshare / relay}});
  }
  if (!o.json.empty()) std::ofstream(o.json) << js.dump(1) << "\n";
  return 0;
}

}  // namespace

Action add_bench_attention_command(CLI::App& bench) {
  auto o = std::make_shared<Opts>();
  CLI::App* a = bench.add_subcommand("attention", "The papers' attention-kernel tables on this CPU (or the GPU: --device cuda)");
  a->add_option("-r,--reps", o->reps, "Timed repetitions per cell (median reported; default 7 on the CPU, 50 on the GPU)")->check(int_in(1, 100000));
  a->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->check(int_in(0, 4096));
  a->add_option("-b,--batch", o->batch, "Batch size of Table 3 / Figure 3")->check(int_in(1, 4096));
  a->add_option("--json", o->json, "Also write the results as JSON to this file");
  a->add_option("--np", o->nps, "Table 3 prompt lengths (default 1024 2048 4096)");
  a->add_option("--shared", o->shared_fractions,
                "Table 3 shared lengths in quarters of n_p (default 0 2 3 4: n_s = 0, n_p/2, 3n_p/4, n_p)")
      ->check(CLI::Range(0, 4));
  a->add_flag("--table3-only", o->table3_only, "Skip the figures");
  a->add_option("--dim", o->dim, "Head dim (64, 96, 128 or 256; default 128)")->check(CLI::IsMember({64, 96, 128, 256}));
  a->add_option("--heads", o->heads, "Query heads, one K/V head each (default 32)")->check(int_in(1, 256));
  a->add_option("--softcap", o->softcap, "Table 3 also times TPP with every score soft-capped at this value (Gemma 2: 50)")
      ->check(CLI::PositiveNumber);
  a->add_flag("--quick", o->quick, "Tiny sizes (a smoke test, not a measurement)");
  a->add_option("--device", o->device, "Where the kernels run: cpu, or cuda (the GPU kernels)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  a->add_option("--window-keys", o->window_keys, "--device cuda: keys per tile window (a multiple of 64, up to 1024)")
      ->check(CLI::Range(64, 1024));
  a->add_option("--decode-stages", o->decode_stages, "--device cuda: pipeline stages of the 16-row tiles (2 or 3; 0: 3 without chunk-first tiles, else 2)")
      ->check(CLI::IsMember({0, 2, 3}));
  return [o] { return run(*o); };
}

}  // namespace cs
