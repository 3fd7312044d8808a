// `chunkserve bench model`: prefill and single-sequence decode speed on a
// model, measured the way llama-bench measures pp/tg (prompt of N tokens in
// one batch; N tokens decoded one at a time), median of repetitions.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <omp.h>

#include "base/cpu.h"
#include "cli/commands.h"
#include "model/llama.h"

namespace cs {
namespace {

struct BenchOptions {
  std::string model;
  int n_prompt = 512, n_gen = 128, reps = 5, threads = 0;
  bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_model(const BenchOptions& o) {
  set_threads(o.threads);
  const std::string path = o.model.empty() ? default_model_path() : o.model;
  auto model = LlamaModel::load(path);
  const LlamaConfig& c = model->config();
  Workspace ws;
  std::vector<float> logits;
  std::vector<double> pp, tg;
  for (int rep = 0; rep < o.reps + 1; ++rep) {  // the first run warms up
    {
      ContiguousKv kv(c.kv_shape(), o.n_prompt + 1);
      Batch b;
      for (int i = 0; i < o.n_prompt; ++i) b.add((i * 7919 + 13) % c.n_vocab, i, 0, i + 1 == o.n_prompt);
      const auto t0 = std::chrono::steady_clock::now();
      model->forward(b, kv, ws, logits);
      if (rep) pp.push_back(o.n_prompt / seconds_since(t0));
    }
    {
      ContiguousKv kv(c.kv_shape(), o.n_gen + 1);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.n_gen; ++i) {
        Batch b;
        b.add((i * 7919 + 13) % c.n_vocab, i, 0, true);
        model->forward(b, kv, ws, logits);
      }
      if (rep) tg.push_back(o.n_gen / seconds_since(t0));
    }
  }
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  if (o.json) {
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"pp\": %d, \"tg\": %d, "
                "\"pp_tps\": %.2f, \"tg_tps\": %.2f}\n",
                path.c_str(), threads, isa_name(cpu_isa()), o.n_prompt, o.n_gen, median(pp), median(tg));
  } else {
    std::printf("| test | threads | isa | tokens/s |\n|---|---|---|---|\n");
    std::printf("| pp%d | %d | %s | %.2f |\n", o.n_prompt, threads, isa_name(cpu_isa()), median(pp));
    std::printf("| tg%d | %d | %s | %.2f |\n", o.n_gen, threads, isa_name(cpu_isa()), median(tg));
  }
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* m = bench->add_subcommand("model", "Prefill and decode tokens/s on a model");
  m->add_option("-m,--model", o->model, "GGUF model file (default: the SmolLM2 model)");
  m->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens (pp test)")->check(CLI::PositiveNumber);
  m->add_option("-n,--n-gen", o->n_gen, "Generated tokens (tg test)")->check(CLI::PositiveNumber);
  m->add_option("-r,--reps", o->reps, "Repetitions (median reported)")->check(CLI::PositiveNumber);
  m->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  m->add_flag("--json", o->json, "Print one JSON line");
  Action attention = add_bench_attention_command(*bench);
  return [o, m, attention] { return m->parsed() ? run_bench_model(*o) : attention(); };
}

}  // namespace cs
