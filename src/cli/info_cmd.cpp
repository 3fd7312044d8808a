// `chunkserve info MODEL`: what the file holds and whether chunkserve runs it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/model_info.h"

namespace cs {

Action add_info_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("info", "Describe a GGUF model file: architecture, size, types, tokenizer, KV bytes");
  c->add_option("model", *path, "The GGUF file (default: the default model)");
  add_model_option(*c, *path, "The GGUF file, as in the other commands");
  return [path] {
    const ModelInfo m = describe_model(model_path(*path));
    std::fputs(format_model_info(m).c_str(), stdout);
    return m.problems.empty() ? 0 : 1;
  };
}

}  // namespace cs
