// `chunkserve generate`: stream a completion of one prompt to stdout, with
// prefill and decode speeds on stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "engine/generate.h"
#include "model/chat_template.h"

namespace cs {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  bool chat = false;
  GenerateParams params;
  int threads = 0;
};

int run_generate(const GenerateOptions& o) {
  set_threads(o.threads);
  auto model = LlamaModel::load(o.model.empty() ? default_model_path() : o.model);
  const Tokenizer& tok = model->tokenizer();
  std::string text = o.prompt;
  if (o.chat)
    text = ChatTemplate::detect(tok.chat_template(), tok.model()).apply({{"user", o.prompt}});
  // Chat prompts carry their special tokens as text; raw prompts do not.
  const std::vector<int32_t> ids = tok.encode(text, o.chat, true);
  GenerateResult r = generate(*model, ids, o.params, [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
  std::fflush(stdout);
  const double pp = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
  const double tg = r.decode_seconds > 0 ? double(r.tokens.size()) / r.decode_seconds : 0;
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %zu tokens, %.1f tokens/s (%s)\n",
               r.prompt_tokens, pp, r.tokens.size(), tg, r.stop_reason.c_str());
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion of one prompt");
  cmd->add_option("-m,--model", o->model, "GGUF model file (default: the SmolLM2 model)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  cmd->add_option("-n,--max-tokens", o->params.max_tokens, "Tokens to generate")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temp", o->params.sampling.temperature, "Temperature (0 = greedy)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->params.sampling.top_k, "Top-k (0 = off)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->params.sampling.top_p, "Top-p (1 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->params.sampling.repeat_penalty, "Repetition penalty (1 = off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->params.sampling.seed, "Sampling seed");
  cmd->add_option("--stop", o->params.stop, "Stop string (repeatable)");
  cmd->add_option("--ctx", o->params.n_ctx, "Context size (default: the model's)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--chunk-cache", o->params.chunk_cache,
                "KV in the prefix-aware chunk cache (two-phase attention) instead of the contiguous cache");
  add_kv_type_option(*cmd, o->params.kv_type);
  return [o] { return run_generate(*o); };
}

}  // namespace cs
