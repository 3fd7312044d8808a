// `chunkserve generate`: stream a completion of one prompt to stdout (through
// the engine, as one request), with prefill and decode speeds on stderr.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/bench_profile.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/generate.h"
#include "model/chat_template.h"

namespace cs {
namespace {

struct GenerateOptions {
  std::string model;
  std::string device = "cpu";
  std::string prompt;
  std::string prediction;  // a file: the output expected
  std::string json_schema, regex, grammar;  // constrained decoding: a file, a regex, a file
  bool json_object = false;
  bool chat = false;
  std::string chat_template;
  GenerateParams params;
};

void write_out(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    throw Error(std::string("cannot write to standard output: ") + std::strerror(errno));
}

std::vector<int32_t> chat_prompt(const LlamaModel& model, const std::string& user) {
  try {
    return model.chat().apply({{"user", user}}).encode(model.tokenizer(), true);
  } catch (const jinja::TemplateError& e) {
    throw Error(std::string("the chat template refused the prompt: ") + e.what());
  }
}

// At most one of --json-schema, --json-object, --regex and --grammar.
std::optional<GrammarSpec> constraint(const GenerateOptions& o) {
  const int given = !o.json_schema.empty() + o.json_object + !o.regex.empty() + !o.grammar.empty();
  if (given > 1) throw Error("give at most one of --json-schema, --json-object, --regex and --grammar");
  if (!o.json_schema.empty()) return GrammarSpec{GrammarKind::kJsonSchema, read_text_file(o.json_schema, "JSON schema")};
  if (o.json_object) return GrammarSpec{GrammarKind::kAnyJson, ""};
  if (!o.regex.empty()) return GrammarSpec{GrammarKind::kRegex, o.regex};
  if (!o.grammar.empty()) return GrammarSpec{GrammarKind::kEbnf, read_text_file(o.grammar, "grammar")};
  return std::nullopt;
}

int run_generate(GenerateOptions o) {
  auto model = load_chat_model(o.model, o.chat_template, o.device, o.params.engine.n_ctx);
  const Tokenizer& tok = model->tokenizer();
  if (o.prompt.empty() == o.params.pml.empty()) throw Error("give a prompt: either -p TEXT or --pml PROMPT");
  if (!o.params.pml.empty() && o.chat) throw Error("--chat applies to -p; a PML prompt has its own role blocks");
  // Special tokens come only from the chat template's markup; a raw prompt is text.
  const std::vector<int32_t> ids =
      o.prompt.empty() ? std::vector<int32_t>()
      : o.chat         ? chat_prompt(*model, o.prompt)
                       : tok.encode(o.prompt, false, true);
  GenerateParams& p = o.params;
  if (!p.pml.empty()) {
    // --pml takes a file or the prompt itself.
    std::ifstream f(p.pml, std::ios::binary);
    if (f) {
      std::ostringstream s;
      s << f.rdbuf();
      p.pml = s.str();
    }
    p.progress = [](const std::string& line) { std::fprintf(stderr, "%s", line.c_str()); };
  }
  p.grammar = constraint(o);
  if (!o.prediction.empty()) p.prediction = tok.encode(read_text_file(o.prediction, "prediction"), false);
  GenerateResult r = generate(*model, ids, p, write_out);
  write_out("\n");
  const double pp = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : 0;
  const double tg = r.decode_seconds > 0 ? (r.sampled - 1) / r.decode_seconds : 0;
  if (!p.pml.empty())
    std::fprintf(stderr, "\nschemas ready in %.2f s | prompt: %d tokens, %d from the cache | time to first token %.1f ms\n",
                 r.encode_seconds, r.prompt_tokens, r.cached_tokens, 1000 * r.prefill_seconds);
  if (!p.engine.kv_disk.empty())
    std::fprintf(stderr, "\nprompt: %d tokens, %d read from the disk tier | time to first token %.1f ms\n",
                 r.prompt_tokens, r.disk_tokens, 1000 * r.prefill_seconds);
  std::fprintf(stderr, "prefill: %d tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s (%s)\n",
               r.prompt_tokens, pp, r.sampled, tg, r.stop_reason.c_str());
  if (r.drafted > 0) std::fprintf(stderr, "speculative decoding: %d draft tokens run, %d taken\n", r.drafted, r.accepted);
  if (p.engine.profile) {
    print_step_profiles(r.prefill_profile, r.decode_profile, stderr);
  }
  return 0;
}

}  // namespace

Action add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion of one prompt");
  add_model_option(*cmd, o->model);
  add_device_option(*cmd, o->device);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("--schema", o->params.schemas, "Prompt Cache: a PML schema to register (repeatable)");
  cmd->add_option("--schema-dir", o->params.schema_dir,
                  "Prompt Cache: where schemas are saved (loaded from it without encoding when saved there)");
  cmd->add_option("--pml", o->params.pml, "Prompt Cache: a PML prompt (a file, or the XML itself)");
  cmd->add_flag("--no-cache", o->params.no_cache, "Compute the PML prompt from scratch (the quality baseline)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template");
  cmd->add_option("--prediction", o->prediction,
                  "A file with the output expected (OpenAI's Predicted Outputs): speculative decoding drafts from it");
  add_chat_template_option(*cmd, o->chat_template);
  SamplingParams& s = o->params.sampling;
  cmd->add_option("-n,--max-tokens", o->params.max_tokens, "Tokens to generate")->check(int_in(0, 1 << 24));
  cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy)")->check(finite_in(0, 100));
  cmd->add_option("--top-k", s.top_k, "Top-k (0 = off)")->check(int_in(0, 1 << 24));
  cmd->add_option("--top-p", s.top_p, "Top-p (1 = off)")->check(finite_in(0, 1, true));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1 = off)")
      ->check(finite_in(0, 100, true));
  cmd->add_option("--seed", s.seed, "Sampling seed");
  cmd->add_option("--stop", o->params.stop, "Stop string (repeatable)");
  cmd->add_option("--json-schema", o->json_schema, "Constrain the output to a JSON schema (a file)");
  cmd->add_flag("--json-object", o->json_object, "Constrain the output to a JSON object");
  cmd->add_option("--regex", o->regex, "Constrain the output to a regular expression");
  cmd->add_option("--grammar", o->grammar, "Constrain the output to an EBNF grammar (a file; root rule 'root')");
  cmd->add_flag("--profile", o->params.engine.profile,
                "Print where the steps' time went: the forward pass's operations, scheduling, sampling");
  add_engine_options(*cmd, o->params.engine, false);
  return [o] { return run_generate(*o); };
}

}  // namespace cs
