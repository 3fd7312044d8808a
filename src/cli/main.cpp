// chunkserve: LLM inference on CPU built around shared prompt prefixes.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <omp.h>
#include <string>

#include "base/error.h"
#include "cli/commands.h"

namespace cs {

std::string default_model_path() {
  if (const char* e = std::getenv("CHUNKSERVE_MODEL")) return e;
  return CHUNKSERVE_DEFAULT_MODEL;
}

void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

void add_kv_type_option(CLI::App& cmd, KvType& type) {
  std::map<std::string, KvType> names;
  for (KvType t : {KvType::kF16, KvType::kBF16, KvType::kF32}) names[kv_type_name(t)] = t;
  cmd.add_option_function<std::string>(
         "--kv-type", [&type, names](const std::string& name) { type = names.at(name); },
         "KV cache element type: f16 (default, as llama.cpp's), bf16 or f32")
      ->check(CLI::IsMember(names));
}

}  // namespace cs

int main(int argc, char** argv) {
  CLI::App app{"chunkserve: CPU LLM inference for workloads that share prompt prefixes"};
  app.require_subcommand(1);
  cs::Action generate = cs::add_generate_command(app);
  cs::Action bench = cs::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("generate")) return generate();
    if (app.got_subcommand("bench")) return bench();
  } catch (const cs::Error& e) {
    std::fprintf(stderr, "chunkserve: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chunkserve: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
