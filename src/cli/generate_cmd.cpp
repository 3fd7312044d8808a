// `chunkserve generate`: stream a completion of one prompt to stdout (through
// the engine, as one request), with prefill and decode speeds on stderr.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "engine/generate.h"
#include "model/chat_template.h"

namespace cs {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  bool chat = false;
  GenerateParams params;
  EngineOptions engine;
};

void write_out(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
}

int run_generate(GenerateOptions o) {
  auto model = LlamaModel::load(o.model.empty() ? default_model_path() : o.model);
  const Tokenizer& tok = model->tokenizer();
  std::string text = o.prompt;
  if (o.chat)
    text = ChatTemplate::detect(tok.chat_template(), tok.model()).apply({{"user", o.prompt}});
  // Chat prompts carry their special tokens as text; raw prompts do not.
  const std::vector<int32_t> ids = tok.encode(text, o.chat, true);
  GenerateParams& p = o.params;
  p.mode = o.engine.mode;
  p.chunk_size = o.engine.chunk_size;
  p.kv_memory = o.engine.kv_memory;
  p.kv_type = o.engine.kv_type;
  p.n_ctx = o.engine.n_ctx;
  p.threads = o.engine.threads;
  GenerateResult r = generate(*model, ids, p, write_out);
  write_out("\n");
  const double pp = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
  const double tg = r.decode_seconds > 0 ? (r.sampled - 1) / r.decode_seconds : 0;
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s (%s)\n",
               r.prompt_tokens, pp, r.sampled, tg, r.stop_reason.c_str());
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion of one prompt");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the SmolLM2 model)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  SamplingParams& s = o->params.sampling;
  cmd->add_option("-n,--max-tokens", o->params.max_tokens, "Tokens to generate")->check(int_in(0, 1 << 24));
  cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy)")->check(finite_in(0, 100));
  cmd->add_option("--top-k", s.top_k, "Top-k (0 = off)")->check(int_in(0, 1 << 24));
  cmd->add_option("--top-p", s.top_p, "Top-p (1 = off)")->check(finite_in(0, 1, true));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1 = off)")
      ->check(finite_in(0, 100, true));
  cmd->add_option("--seed", s.seed, "Sampling seed");
  cmd->add_option("--stop", o->params.stop, "Stop string (repeatable)");
  add_engine_options(*cmd, o->engine, false);
  return [o] { return run_generate(*o); };
}

}  // namespace cs
