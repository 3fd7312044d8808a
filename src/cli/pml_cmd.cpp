// `chunkserve pml check FILE...`: parse PML schemas (or prompts) and print
// each schema's layout: every module's position IDs and token count, every
// parameter's reserved positions, in the default model's tokenization.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/chat_template.h"
#include "model/llama.h"
#include "pml/encode.h"
#include "pml/layout.h"

namespace cs {
namespace {

struct PmlOptions {
  std::string model;
  std::string chat_template;
  std::vector<std::string> files;
};

int run_check(const PmlOptions& o) {
  auto model = load_chat_model(o.model, o.chat_template);
  const Tokenizer& tok = model->tokenizer();
  const pml::Encoder enc = [&tok](const std::string& t, bool special) { return tok.encode(t, special, false); };
  const pml::RoleMarkers roles = pml::text_model(*model).roles;
  for (const std::string& f : o.files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error("cannot read '" + f + "'");
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().find("<prompt") != std::string::npos && text.str().find("<schema") == std::string::npos) {
      const pml::Prompt p = pml::parse_prompt(text.str(), f);
      std::printf("%s: a prompt for schema '%s' (%zu items)\n", f.c_str(), p.schema.c_str(), p.items.size());
      continue;
    }
    const pml::Schema s = pml::parse_schema_file(f);
    const std::vector<int32_t> bos = tok.encode("", false, true);
    std::printf("%s\n%s\n", f.c_str(), pml::describe(pml::lay_out(s, enc, roles, bos)).c_str());
  }
  return 0;
}

}  // namespace

Action add_pml_command(CLI::App& app) {
  auto o = std::make_shared<PmlOptions>();
  CLI::App* pml = app.add_subcommand("pml", "Prompt Markup Language tools");
  pml->require_subcommand(1);
  CLI::App* check = pml->add_subcommand("check", "Parse PML files and print each schema's layout (position IDs)");
  check->add_option("files", o->files, "PML files (schemas or prompts)")->required();
  add_model_option(*check, o->model, "GGUF model whose tokenizer and chat template lay it out");
  add_chat_template_option(*check, o->chat_template);
  return [o] { return run_check(*o); };
}

}  // namespace cs
