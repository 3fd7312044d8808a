// `chunkserve bench engine`: the serving engine end to end on a model.
//  (a) llama.cpp batched-bench's shape (-pps, prompt shared): one prompt of
//      PP tokens, B completions of it (forked from one prefill) each
//      generating TG tokens after the first. Prefill tokens/s = PP / T_PP
//      (T_PP: time to the first tokens), decode tokens/s = B*TG / T_TG, total
//      tokens/s = (PP + B*TG) / (T_PP + T_TG), peak KV bytes.
//  (b) --poisson: ChunkAttention's Table 4 serving workload. Requests arrive
//      as a Poisson process at --rate per second; n_p prompt tokens of which
//      the first n_s are shared by all, n_c completion tokens (sampled, each
//      request its own seed); at most --max-batch running. Normalized latency
//      = mean end-to-end latency (queueing included) / n_c; TTFT p50/p99;
//      throughput; peak KV bytes and peak batch.
//  (c) --json-schema FILE (batched): each round runs the mode unconstrained
//      and then every completion under the schema, both sampled at
//      temperature 1 (so each completion walks its own path through the
//      grammar): the cost of constrained decoding per token, masks included.
// Each (mode, repetition) runs on a fresh engine, so nothing stays cached
// between runs; one JSON object per run with --json.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "base/cpu.h"
#include "base/cuda.h"
#include "cli/bench_profile.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/engine.h"

namespace cs {
namespace {

struct BenchEngineOptions {
  std::string model;
  std::string device = "cpu";
  EngineOptions engine;
  std::vector<std::string> modes{"tpp"};
  int pp = 4096, tg = 32, batch = 32, reps = 1;
  bool json = false, poisson = false;
  double rate = 1.0;
  int np = 2048, ns = 2048, nc = 64, requests = 32;
  unsigned seed = 1;
  std::string schema_file;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Synthetic prompt tokens (the model does not care what they mean): token i
// of stream `salt`, kept clear of the first ids (special tokens).
std::vector<int32_t> tokens(int n, int salt, int n_vocab) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = int32_t(1000 + (uint64_t(i) * 7919 + uint64_t(salt) * 104729) % uint64_t(n_vocab - 1000));
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

EngineOptions engine_for(const BenchEngineOptions& o, const std::string& mode) {
  EngineOptions e = o.engine;
  e.mode = *attn_mode_from(mode);
  return e;
}

void batched_run(const LlamaModel& model, const BenchEngineOptions& o, const std::string& mode, int rep,
                 const std::string& schema = "") {
  EngineOptions eo = engine_for(o, mode);
  eo.max_batch = std::max(eo.max_batch, o.batch);
  Engine engine(model, eo);
  Request r;
  r.prompt = tokens(o.pp, 0, model.config().n_vocab);
  r.n = o.batch;
  r.max_tokens = o.tg + 1;  // the first token comes from the prefill
  r.ignore_eos = true;
  if (!o.schema_file.empty()) {
    // Both runs of a round sample the same way, so the difference is the
    // grammar's: its masks and what they change in sampling.
    r.sampling.temperature = 1.0f;
    r.sampling.seed = uint64_t(rep + 1);
  }
  if (!schema.empty()) r.grammar = engine.compile_grammar({GrammarKind::kJsonSchema, schema});
  const std::string label = schema.empty() ? mode : mode + "+schema";
  const Result res = engine.submit(r).wait();
  if (res.completions[0].reason == FinishReason::kError) throw Error(res.completions[0].message);
  engine.wait_idle(std::chrono::seconds(60));
  const EngineStats s = engine.stats();
  // Prefill ends when every sequence has its first token (mode none
  // prefills each on its own).
  double t_pp = 0;
  for (const Completion& c : res.completions) t_pp = std::max(t_pp, c.ttft_s);
  const double t_tg = res.timings.total_s - t_pp;
  // Tokens after each completion's first (a schema may end one early).
  double generated = 0;
  for (const Completion& c : res.completions) generated += double(std::max<size_t>(c.tokens.size(), 1) - 1);
  const double prefill = o.pp / t_pp, decode = generated / t_tg, total = (o.pp + generated) / (t_pp + t_tg);
  // KV held by live sequences (retained chunks of finished ones are a cache
  // the pool evicts when it needs room).
  const size_t peak_kv = size_t(s.peak_kv_used) * s.kv.chunk_bytes;
  if (rep < 0) return;  // warm-up
  const std::string prof = eo.profile ? ", \"profile\": {\"prefill\": " + step_profile_json(s.prefill_profile) +
                                            ", \"decode\": " + step_profile_json(s.decode_profile) + "}"
                                      : "";
  if (o.json) {
    std::printf("{\"workload\": \"batched\", \"mode\": \"%s\", \"rep\": %d, \"pp\": %d, \"tg\": %d, \"batch\": %d, "
                "\"threads\": %d, \"isa\": \"%s\", \"kv_type\": \"%s\", \"t_pp\": %.4f, \"t_tg\": %.4f, "
                "\"prefill_tps\": %.2f, \"decode_tps\": %.2f, \"total_tps\": %.2f, \"peak_kv_bytes\": %zu, "
                "\"preemptions\": %llu%s}\n",
                label.c_str(), rep, o.pp, o.tg, o.batch, s.threads, isa_name(cpu_isa()), kv_type_name(eo.kv_type), t_pp,
                t_tg, prefill, decode, total, peak_kv, (unsigned long long)s.preemptions, prof.c_str());
  } else {
    std::printf("| %s | %d | %d | %d | %.3f | %.1f | %.3f | %.1f | %.1f | %.1f |\n", label.c_str(), o.pp, o.tg, o.batch,
                t_pp, prefill, t_tg, decode, total, double(peak_kv) / (1 << 20));
    if (eo.profile) print_step_profiles(s.prefill_profile, s.decode_profile);
  }
  std::fflush(stdout);
}

void poisson_run(const LlamaModel& model, const BenchEngineOptions& o, const std::string& mode, int rep) {
  const EngineOptions eo = engine_for(o, mode);
  Engine engine(model, eo);
  const int V = model.config().n_vocab;
  const std::vector<int32_t> shared = tokens(o.ns, 0, V);
  std::mt19937_64 rng(o.seed + uint64_t(rep));
  std::exponential_distribution<double> gap(o.rate);
  std::vector<RequestHandle> handles;
  const auto t0 = Clock::now();
  double next = 0, last_progress = 0;
  auto progress = [&](bool final) {
    const EngineStats s = engine.stats();
    std::fprintf(stderr, "\r[%s] %d/%d submitted, %llu done, %d running, %d waiting   %s", mode.c_str(),
                 int(handles.size()), o.requests, (unsigned long long)s.finished, s.running, s.waiting,
                 final ? "\n" : "");
  };
  for (int i = 0; i < o.requests; ++i) {
    next += gap(rng);
    while (since(t0) < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (since(t0) - last_progress > 0.5) progress(false), last_progress = since(t0);
    }
    Request r;
    r.prompt = shared;
    const auto own = tokens(o.np - o.ns, i + 1, V);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.max_tokens = o.nc;
    r.ignore_eos = true;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = uint64_t(i);
    handles.push_back(engine.submit(std::move(r)));
  }
  std::vector<double> e2e, ttft;
  for (auto& h : handles) {
    while (!h.done()) {
      h.next(std::chrono::milliseconds(500));
      if (since(t0) - last_progress > 0.5) progress(false), last_progress = since(t0);
    }
    const Result res = h.wait();
    e2e.push_back(res.timings.total_s);
    ttft.push_back(res.timings.ttft_s);
  }
  const double wall = since(t0);
  progress(true);
  engine.wait_idle(std::chrono::seconds(60));
  const EngineStats s = engine.stats();
  double mean = 0;
  for (double t : e2e) mean += t;
  mean /= double(e2e.size());
  const double norm_ms = 1000 * mean / o.nc, thr = double(o.requests) * o.nc / wall;
  const size_t peak_kv = size_t(s.peak_kv_used) * s.kv.chunk_bytes;
  if (o.json) {
    std::printf("{\"workload\": \"poisson\", \"mode\": \"%s\", \"rep\": %d, \"rate\": %.3f, \"np\": %d, \"ns\": %d, "
                "\"nc\": %d, \"requests\": %d, \"threads\": %d, \"isa\": \"%s\", \"normalized_latency_ms\": %.2f, "
                "\"ttft_p50\": %.3f, \"ttft_p99\": %.3f, \"throughput_tps\": %.2f, \"requests_per_s\": %.3f, "
                "\"peak_kv_bytes\": %zu, \"peak_batch\": %d, \"preemptions\": %llu}\n",
                mode.c_str(), rep, o.rate, o.np, o.ns, o.nc, o.requests, s.threads, isa_name(cpu_isa()), norm_ms,
                percentile(ttft, 0.5), percentile(ttft, 0.99), thr, o.requests / wall, peak_kv, s.peak_running,
                (unsigned long long)s.preemptions);
  } else {
    std::printf("| %s | %d | %d | %d | %.2f | %.1f | %.2f | %.2f | %.1f | %.1f | %d |\n", mode.c_str(), o.np, o.ns,
                o.nc, o.rate, norm_ms, percentile(ttft, 0.5), percentile(ttft, 0.99), thr,
                double(peak_kv) / (1 << 20), s.peak_running);
  }
  std::fflush(stdout);
}

int run_bench_engine(BenchEngineOptions o) {
  if (o.modes.size() == 1 && o.modes[0] == "all") o.modes = {"tpp", "per-sequence", "relay", "none"};
  for (const auto& m : o.modes)
    if (!attn_mode_from(m)) throw Error("unknown mode '" + m + "' (tpp, per-sequence, relay, none, all)");
  if (o.poisson && (o.ns > o.np || o.np < 1 || o.nc < 1 || o.rate <= 0 || o.requests < 1))
    throw Error("--poisson needs 0 <= --ns <= --np, --nc >= 1, --rate > 0 and --requests >= 1");
  auto model = load_model(o.model, o.device, o.engine.n_ctx);
  if (!o.json && model->backend().on_device())
    std::printf("device: cuda (%s)\n\n", cuda::device_info().name.c_str());
  if (!o.json) {
    if (o.poisson)
      std::printf("| mode | n_p | n_s | n_c | RPS | latency ms/tok | TTFT p50 s | TTFT p99 s | tokens/s | peak KV MiB | peak batch |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    else
      std::printf("| mode | PP | TG | B | T_PP s | S_PP t/s | T_TG s | S_TG t/s | S t/s | peak KV MiB |\n|---|---|---|---|---|---|---|---|---|---|\n");
  }
  // Rounds alternate the modes, so each sees the same spells of host noise.
  if (!o.poisson) {  // warm-up: threads, page faults of the pool, caches
    BenchEngineOptions w = o;
    w.pp = std::min(o.pp, 256), w.tg = 4, w.batch = std::min(o.batch, 4);
    batched_run(*model, w, o.modes[0], -1);
  }
  const std::string schema = o.schema_file.empty() ? "" : read_text_file(o.schema_file, "JSON schema");
  for (int rep = 0; rep < o.reps; ++rep)
    for (const auto& m : o.modes) {
      if (o.poisson) {
        poisson_run(*model, o, m, rep);
        continue;
      }
      batched_run(*model, o, m, rep);
      if (!schema.empty()) batched_run(*model, o, m, rep, schema);
    }
  return 0;
}

}  // namespace

Action add_bench_engine_command(CLI::App& bench) {
  auto o = std::make_shared<BenchEngineOptions>();
  CLI::App* c = bench.add_subcommand("engine", "The serving engine end to end: batched-bench's shape, or --poisson (Table 4)");
  add_model_option(*c, o->model);
  add_device_option(*c, o->device);
  c->add_option("--mode", o->modes, "Attention modes to run: tpp, per-sequence, relay, none, or all")->expected(1, 4);
  c->add_option("--pp", o->pp, "Shared prompt tokens (batched)")->check(int_in(1, 1 << 20));
  c->add_option("--tg", o->tg, "Tokens generated per sequence after the first (batched)")->check(int_in(1, 1 << 20));
  c->add_option("--batch", o->batch, "Sequences (batched)")->check(int_in(1, 1024));
  c->add_option("-r,--reps", o->reps, "Runs of each mode, alternating")->check(int_in(1, 1000));
  c->add_flag("--json", o->json, "One JSON object per run");
  c->add_flag("--profile", o->engine.profile,
              "Also time each step's parts and the forward pass's operations (batched; model/op_profile.h)");
  c->add_flag("--poisson", o->poisson, "Poisson arrivals (ChunkAttention Table 4)");
  c->add_option("--rate", o->rate, "Requests per second (poisson)")->check(finite_in(0, 1000, true));
  c->add_option("--np", o->np, "Prompt tokens per request (poisson)")->check(int_in(1, 1 << 20));
  c->add_option("--ns", o->ns, "Leading prompt tokens shared by all requests (poisson)")->check(int_in(0, 1 << 20));
  c->add_option("--nc", o->nc, "Completion tokens per request (poisson)")->check(int_in(1, 1 << 20));
  c->add_option("--requests", o->requests, "Requests (poisson)")->check(int_in(1, 1 << 20));
  c->add_option("--seed", o->seed, "Arrival and sampling seed (poisson)");
  c->add_option("--json-schema", o->schema_file,
                "Also run each round constrained by this JSON schema (batched; the cost of constrained decoding)");
  add_engine_options(*c, o->engine, true);
  return [o] { return run_bench_engine(*o); };
}

}  // namespace cs
