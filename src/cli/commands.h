// Subcommands of the `chunkserve` binary. Each registers its options on the
// CLI11 app and returns the action to run when it was chosen.
#pragma once
#include <functional>
#include <string>

#include "kv/chunk_pool.h"

namespace CLI {
class App;
}

namespace cs {

using Action = std::function<int()>;

Action add_generate_command(CLI::App& app);
Action add_serve_command(CLI::App& app);
Action add_pml_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_perplexity_command(CLI::App& app);
Action add_info_command(CLI::App& app);
// Registered under `bench` by add_bench_command.
Action add_bench_attention_command(CLI::App& bench);
Action add_bench_engine_command(CLI::App& bench);
Action add_bench_pml_command(CLI::App& bench);
Action add_bench_matmul_command(CLI::App& bench);

// The model used when -m is not given: $CHUNKSERVE_MODEL, else the default
// model fetched by scripts/setup.sh.
std::string default_model_path();
// Applies --threads (0 = all cores; never more than the cores available).
void set_threads(int n);

}  // namespace cs
