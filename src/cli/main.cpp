// chunkserve: LLM inference on CPU built around shared prompt prefixes.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <omp.h>
#include <string>

#include "base/error.h"
#include "base/threads.h"
#include "cli/commands.h"

namespace cs {

std::string default_model_path() {
  if (const char* e = std::getenv("CHUNKSERVE_MODEL")) return e;
  return CHUNKSERVE_DEFAULT_MODEL;
}

void set_threads(int n) { omp_set_num_threads(thread_cap(n)); }

}  // namespace cs

int main(int argc, char** argv) {
  CLI::App app{"chunkserve: LLM inference on CPUs and NVIDIA GPUs for workloads that share prompt prefixes"};
  app.require_subcommand(1);
  cs::Action generate = cs::add_generate_command(app);
  cs::Action serve = cs::add_serve_command(app);
  cs::Action pml = cs::add_pml_command(app);
  cs::Action bench = cs::add_bench_command(app);
  cs::Action perplexity = cs::add_perplexity_command(app);
  cs::Action info = cs::add_info_command(app);
  // CLI11 would only say that a subcommand is required.
  const auto known = app.get_subcommands([&](const CLI::App* c) { return argc > 1 && c->check_name(argv[1]); });
  if (argc > 1 && argv[1][0] != '-' && known.empty()) {
    std::fprintf(stderr, "chunkserve: unknown command '%s' (commands: generate, serve, pml, bench, perplexity, info; see --help)\n", argv[1]);
    return 109;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("serve")) return serve();
    if (app.got_subcommand("pml")) return pml();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("perplexity")) return perplexity();
    if (app.got_subcommand("info")) return info();
  } catch (const cs::Error& e) {
    std::fprintf(stderr, "chunkserve: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chunkserve: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
