// `chunkserve info MODEL`: what the file holds and whether chunkserve runs it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "base/cuda.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "model/model_info.h"
#include "server/tool_calls.h"

namespace cs {

namespace {

// How the server reads calls for this file: in the format of the template a
// request with tools renders with (the tool template where it takes tools,
// else the chat template), or the generic format where neither does.
std::string tool_calls_line(const ModelInfo& m) {
  for (const std::string* source : {&m.tool_template_source, &m.template_source}) {
    if (source->empty()) continue;
    const ToolSyntax s = tool_syntax(*source);
    if (s.template_takes_tools) return std::string(tool_format_name(s.format)) + " (the template's own format)";
  }
  return "generic (tools described in a system message, calls as <tool_call> JSON; docs/tool_calls.md)";
}

}  // namespace

Action add_info_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("info", "Describe a GGUF model file: architecture, size, types, tokenizer, KV bytes");
  c->add_option("model", *path, "The GGUF file (default: the default model)");
  add_model_option(*c, *path, "The GGUF file, as in the other commands");
  return [path] {
    const ModelInfo m = describe_model(model_path(*path));
    std::fputs(format_model_info(m).c_str(), stdout);
    std::printf("tool calls     %s\n", tool_calls_line(m).c_str());
    // Where --device can run it: the CPU always; the GPU when one is usable.
    std::string why;
    if (cuda::device_available(&why))
      std::printf("devices        cpu, cuda (%s)\n", cuda::device_info().name.c_str());
    else
      std::printf("devices        cpu (cuda: %s)\n", why.c_str());
    return m.problems.empty() ? 0 : 1;
  };
}

}  // namespace cs
