// `chunkserve bench model`: prefill and single-sequence decode speed on a
// model, measured the way llama-bench measures pp/tg (prompt of N tokens in
// one batch; N tokens decoded one at a time), median of repetitions. With
// --n-depth D both run after D context tokens (prefilled, untimed), as
// llama-bench -d does: the attention over a long context is then part of
// what is timed. On --device cuda the KV is on the GPU (model/sequence_kv.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <omp.h>

#include "base/cpu.h"
#include "base/error.h"
#include "base/cuda.h"
#include "cli/bench_profile.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "model/llama.h"
#include "model/sequence_kv.h"

namespace cs {
namespace {

struct BenchOptions {
  std::string model;
  std::string device = "cpu";
  int n_prompt = 512, n_gen = 128, reps = 5, threads = 0, depth = 0;
  KvType kv_type = KvType::kF16;
  bool json = false, profile = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Prefills `depth` tokens of sequence 0 into kv (untimed), in batches of 512.
void fill_context(LlamaModel& model, KvStore& kv, Workspace& ws, std::vector<float>& logits, int depth) {
  const int n_vocab = model.config().n_vocab;
  for (int i0 = 0; i0 < depth; i0 += 512) {
    Batch b;
    for (int i = i0; i < std::min(depth, i0 + 512); ++i) b.add((i * 104729 + 7) % n_vocab, i, 0, false);
    model.forward(b, kv, ws, logits);
  }
}

// A table of both tests' profiles: milliseconds per step and share of the
// forward pass per operation.
void print_profile(const OpProfile& pp, double pp_steps, const OpProfile& tg, double tg_steps) {
  std::printf("\n| operation | pp ms/step | pp share | tg ms/token | tg share |\n|---|---|---|---|---|\n");
  for (int i = 0; i < kProfOps; ++i)
    std::printf("| %s | %.3f | %.1f%% | %.4f | %.1f%% |\n", prof_op_name(ProfOp(i)), 1e3 * pp.seconds[i] / pp_steps,
                100 * pp.seconds[i] / pp.total(), 1e3 * tg.seconds[i] / tg_steps, 100 * tg.seconds[i] / tg.total());
  std::printf("| (forward) | %.3f | | %.4f | |\n\nweights read by the matmuls: pp %.1f GB/s, tg %.1f GB/s\n",
              1e3 * pp.total() / pp_steps, 1e3 * tg.total() / tg_steps, pp.matmul_bandwidth() / 1e9,
              tg.matmul_bandwidth() / 1e9);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_model(const BenchOptions& o) {
  set_threads(o.threads);
  const std::string path = model_path(o.model);
  // The context llama-bench gives its tests (what a LongRoPE file's factors depend on).
  auto model = load_model(path, o.device, o.depth + o.n_prompt + o.n_gen);
  const LlamaConfig& c = model->config();
  // Both tests must fit the model's context (this also keeps positions and
  // the synthetic token ids far from int overflow).
  const int longest = std::max(o.n_prompt, o.n_gen);
  if (c.n_ctx_train > 0 && int64_t(o.depth) + longest > c.n_ctx_train)
    throw Error("-d " + std::to_string(o.depth) + " plus " + std::to_string(longest) +
                " test tokens exceeds the model's context of " + std::to_string(c.n_ctx_train));
  Workspace ws;
  std::vector<float> logits;
  std::vector<double> pp, tg;
  OpProfile pp_prof, tg_prof;
  cuda::LaunchStats tg_launch;  // decode's kernel launches and how they went (a device model)
  double tg_busy_us = 0;        // ... and the device's time in them
  const bool on_device = model->backend().on_device();
  if (on_device) cuda::set_send_timing(true);
  const int D = o.depth;
  for (int rep = 0; rep < o.reps + 1; ++rep) {  // the first run warms up
    {
      const auto kv_made = sequence_kv(*model, D + o.n_prompt + 1, o.kv_type);
      KvStore& kv = *kv_made;
      fill_context(*model, kv, ws, logits, D);
      Batch b;
      for (int i = 0; i < o.n_prompt; ++i) b.add((i * 7919 + 13) % c.n_vocab, D + i, 0, i + 1 == o.n_prompt);
      if (o.profile && rep) ws.profile = &pp_prof;
      const auto t0 = std::chrono::steady_clock::now();
      model->forward(b, kv, ws, logits);
      if (rep) pp.push_back(o.n_prompt / seconds_since(t0));
      ws.profile = nullptr;
    }
    {
      const auto kv_made = sequence_kv(*model, D + o.n_gen + 1, o.kv_type);
      KvStore& kv = *kv_made;
      fill_context(*model, kv, ws, logits, D);
      if (o.profile && rep) ws.profile = &tg_prof;
      const cuda::LaunchStats before = on_device ? cuda::launch_stats() : cuda::LaunchStats{};
      const double busy_before = on_device ? cuda::device_busy_us() : 0.0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.n_gen; ++i) {
        Batch b;
        b.add((i * 7919 + 13) % c.n_vocab, D + i, 0, true);
        model->forward(b, kv, ws, logits);
      }
      if (rep) tg.push_back(o.n_gen / seconds_since(t0));
      if (rep && on_device) tg_launch += cuda::launch_stats() - before, tg_busy_us += cuda::device_busy_us() - busy_before;
      ws.profile = nullptr;
    }
  }
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const double pp_steps = o.reps, tg_steps = double(o.reps) * o.n_gen;
  if (o.json) {
    std::string prof = o.profile ? ", \"profile\": {\"pp\": " + profile_json(pp_prof, pp_steps) +
                                       ", \"tg\": " + profile_json(tg_prof, tg_steps) + "}"
                                 : "";
    if (on_device)
      prof += ", \"cuda_graphs\": " + std::string(cuda::graphs() ? "true" : "false") +
              ", \"tg_launches_per_token\": " + std::to_string(double(tg_launch.launches) / tg_steps) +
              ", \"tg_device_ms_per_token\": " + std::to_string(tg_busy_us / 1e3 / tg_steps) +
              ", \"tg_flushes\": {\"direct\": " + std::to_string(tg_launch.direct) +
              ", \"replays\": " + std::to_string(tg_launch.replays) + ", \"updates\": " +
              std::to_string(tg_launch.updates) + ", \"builds\": " + std::to_string(tg_launch.builds) + "}";
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"kv_type\": \"%s\", \"pp\": %d, "
                "\"tg\": %d, \"depth\": %d, \"pp_tps\": %.2f, \"tg_tps\": %.2f%s, \"device\": \"%s\"}\n",
                path.c_str(), threads, isa_name(cpu_isa()), kv_type_name(o.kv_type), o.n_prompt, o.n_gen, D,
                median(pp), median(tg), prof.c_str(), o.device.c_str());
  } else {
    const std::string at = D ? " @ d" + std::to_string(D) : "";
    const char *isa = isa_name(cpu_isa()), *kv = kv_type_name(o.kv_type);
    if (model->backend().on_device()) std::printf("device: cuda (%s)\n\n", cuda::device_info().name.c_str());
    std::printf("| test | threads | isa | kv | tokens/s |\n|---|---|---|---|---|\n");
    std::printf("| pp%d%s | %d | %s | %s | %.2f |\n", o.n_prompt, at.c_str(), threads, isa, kv, median(pp));
    std::printf("| tg%d%s | %d | %s | %s | %.2f |\n", o.n_gen, at.c_str(), threads, isa, kv, median(tg));
    if (on_device)
      std::printf(
          "\ndecode on the GPU: %.1f kernel launches a token, sent at %.2f points a token: %llu as a graph replayed, "
          "%llu updated, %llu built, %llu one by one (CUDA graphs %s)\n",
          double(tg_launch.launches) / tg_steps, double(tg_launch.flushes) / tg_steps,
          (unsigned long long)tg_launch.replays, (unsigned long long)tg_launch.updates,
          (unsigned long long)tg_launch.builds, (unsigned long long)tg_launch.direct, cuda::graphs() ? "on" : "off");
    if (on_device && tg_busy_us > 0) {
      const double wall_ms = 1e3 / median(tg), busy_ms = tg_busy_us / 1e3 / tg_steps;
      std::printf("the device ran its sends %.3f ms a token of %.3f (median): %.0f%% of a token outside them (the "
                  "host's step, copies, sampling, gaps between sends)\n",
                  busy_ms, wall_ms, 100.0 * std::max(0.0, 1.0 - busy_ms / wall_ms));
    }
    if (o.profile) print_profile(pp_prof, pp_steps, tg_prof, tg_steps);
  }
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* m = bench->add_subcommand("model", "Prefill and decode tokens/s on a model");
  add_model_option(*m, o->model);
  add_device_option(*m, o->device);
  m->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (pp test)")->check(int_in(1, 1 << 20));
  m->add_option("-n,--n-gen", o->n_gen, "Generated tokens (tg test)")->check(int_in(1, 1 << 20));
  m->add_option("-d,--n-depth", o->depth, "Context tokens cached before each test (untimed)")
      ->check(int_in(0, 1 << 24));
  m->add_option("-r,--reps", o->reps, "Repetitions (median reported)")->check(int_in(1, 100000));
  m->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->check(int_in(0, 4096));
  m->add_flag("--json", o->json, "Print one JSON line");
  m->add_flag("--profile", o->profile, "Also time each kind of operation (model/op_profile.h)");
  add_kv_type_option(*m, o->kv_type);
  Action attention = add_bench_attention_command(*bench);
  Action engine = add_bench_engine_command(*bench);
  Action pml = add_bench_pml_command(*bench);
  Action matmul = add_bench_matmul_command(*bench);
  CLI::App* a = bench->get_subcommand("attention");
  CLI::App* e = bench->get_subcommand("engine");
  CLI::App* mm = bench->get_subcommand("matmul");
  return [o, m, a, e, mm, attention, engine, pml, matmul] {
    return m->parsed()    ? run_bench_model(*o)
           : a->parsed()  ? attention()
           : e->parsed()  ? engine()
           : mm->parsed() ? matmul()
                          : pml();
  };
}

}  // namespace cs
