// `chunkserve bench pml`: Prompt Cache's Figure 5 on this CPU. For each module
// length L, a schema of one system block and one module of L tokens; a prompt
// that imports the module and adds about --new tokens of new text. Time to
// first token with the module read from its pinned chunks, against the same
// prompt computed from scratch (--no-cache) on a second engine that retains
// nothing (so no run finds an earlier one's prefix), alternating, median of
// -r runs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "base/cpu.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/engine.h"

namespace cs {
namespace {

struct BenchPmlOptions {
  std::string model;
  std::string device = "cpu";
  std::vector<int> lengths{512, 1024, 2048, 4096, 7936};
  int new_tokens = 64, reps = 3;
  bool json = false;
  bool cached_only = false;  // for profiling: no from-scratch runs
  std::string quality;  // the directory of the example schemas: run the quality report instead
  EngineOptions engine;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The quality report's prompts: 32 over the three example schemas (every
// MBTI combination, trips with their parameters, source files to import).
std::vector<std::pair<std::string, std::string>> quality_prompts() {
  std::vector<std::pair<std::string, std::string>> out;  // (schema file, prompt)
  for (int m = 0; m < 16; ++m) {
    std::string p = "<prompt schema=\"mbti\">";
    p += m & 1 ? "<E/>" : "<I/>";
    p += m & 2 ? "<S/>" : "<N/>";
    p += m & 4 ? "<T/>" : "<F/>";
    p += m & 8 ? "<J/>" : "<P/>";
    out.emplace_back("schema_mbti_short.xml", p + "<user>Describe Alex in two sentences.</user></prompt>");
  }
  const char* places[] = {"maldives", "amazon", "sahara", "tokyo", "rome", "capetown", "sydney", "buenosaires"};
  const char* durations[] = {"3 days", "a week", "ten days", "2 weeks"};
  for (int i = 0; i < 8; ++i)
    out.emplace_back("parameterized_prompts.xml", std::string("<prompt schema=\"travel\"><travel-plan duration=\"") +
                                                      durations[i % 4] + "\"><overseas><" + places[i] +
                                                      "/></overseas></travel-plan><user>Plan the first day.</user></prompt>");
  for (const char* city : {"Chicago", "Seattle"})
    out.emplace_back("parameterized_prompts.xml", std::string("<prompt schema=\"travel\"><travel-plan duration=\"a weekend\">"
                                                              "<domestic city=\"") + city +
                                                      "\"/></travel-plan><user>What should I pack?</user></prompt>");
  const char* files[][3] = {{"book.py", "user.py", ""}, {"inventory.py", "book.py", ""}, {"store.py", "database.py", ""},
                            {"book.py", "inventory.py", "store.py"}, {"user.py", "", ""}, {"database.py", "book.py", ""}};
  const char* asks[] = {"Add a method that returns the price with tax.", "Write a function that lists all authors.",
                        "Explain what the store class does.", "Add input validation to the constructor.",
                        "Write a unit test for login.", "Add a method to delete a book by isbn."};
  for (int i = 0; i < 6; ++i) {
    std::string p = "<prompt schema=\"code-generation-bookstore\">";
    for (const char* f : files[i])
      if (*f) p += "<" + std::string(f) + "/>";
    out.emplace_back("code_generation_bookstore.xml", p + "<user>" + asks[i] + "</user></prompt>");
  }
  return out;
}

// Greedy 32 tokens of every quality prompt, cached and from scratch: the
// tokens agree up to where?
int run_quality(const BenchPmlOptions& o, const LlamaModel& model) {
  Engine cached(model, o.engine);
  EngineOptions plain = o.engine;
  plain.retain = false;
  Engine scratch(model, plain);
  for (const char* f : {"schema_mbti_short.xml", "parameterized_prompts.xml", "code_generation_bookstore.xml"})
    cached.register_schema(pml::parse_schema_file(o.quality + "/" + f));
  int first = 0, all = 0, n = 0, seconds = 0;
  double agree_sum = 0;
  std::vector<double> gaps;
  if (!o.json)
    std::printf("| schema | prompt tokens | cached | first token | tokens agreeing (of 32) | top-2 gap where they part |\n"
                "|---|---|---|---|---|---|\n");
  for (const auto& [file, prompt] : quality_prompts()) {
    Request a = cached.pml_request(prompt, true), b = cached.pml_request(prompt, false);
    for (Request* r : {&a, &b}) r->max_tokens = 32, r->ignore_eos = true, r->logprobs = 2;
    const Result ra = cached.submit(std::move(a)).wait(), rb = scratch.submit(std::move(b)).wait();
    const auto &x = ra.completions[0].tokens, &y = rb.completions[0].tokens;
    size_t k = 0;
    while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
    ++n;
    first += k > 0;
    all += k == 32;
    agree_sum += double(k);
    // Where they part: how sure was the from-scratch run of its token, and
    // was the cached run's token its second choice?
    float gap = -1;
    bool second = false;
    if (k < y.size() && k < x.size() && rb.completions[0].logprobs.size() > k) {
      const auto& top = rb.completions[0].logprobs[k].top;
      if (top.size() == 2) gap = top[0].logprob - top[1].logprob, second = top[1].token == x[k];
      gaps.push_back(gap);
      seconds += second;
    }
    if (o.json)
      std::printf("{\"schema\": \"%s\", \"prompt_tokens\": %d, \"cached_tokens\": %d, \"agree\": %zu, "
                  "\"gap_at_divergence\": %.3f, \"cached_took_second_choice\": %s}\n",
                  file.c_str(), ra.usage.prompt_tokens, ra.usage.cached_tokens, k, gap, second ? "true" : "false");
    else
      std::printf("| %s | %d | %d | %s | %zu | %s |\n", file.c_str(), ra.usage.prompt_tokens, ra.usage.cached_tokens,
                  k > 0 ? "same" : "differs", k,
                  gap < 0 ? "-" : (std::to_string(gap).substr(0, 5) + (second ? " (2nd choice)" : "")).c_str());
  }
  std::printf("%d prompts: first token the same in %d, all 32 tokens the same in %d, %.1f tokens agree on average\n", n,
              first, all, agree_sum / n);
  if (!gaps.empty())
    std::printf("where they part, the from-scratch run's top-2 logprob gap: median %.3f (%zu partings); the cached run "
                "took its second choice in %d\n",
                median(gaps), gaps.size(), seconds);
  return 0;
}

// About n tokens of English-like text (SmolLM2's tokenizer: one token a word).
std::string text_of(const Tokenizer& tok, int n, int salt) {
  static const char* words[] = {"the", "river", "stone", "cloud", "music", "paper", "light", "garden",
                                "window", "silver", "ocean", "forest", "bread", "village", "story", "dragon"};
  std::string out;
  int i = 0;
  while (true) {
    const std::string next = out + (out.empty() ? "" : " ") + words[(i * 7 + salt) % 16];
    if (int(tok.encode(next, false, false).size()) > n) return out;
    out = next;
    ++i;
  }
}

int run(const BenchPmlOptions& o) {
  auto model = load_model(o.model, o.device, o.engine.n_ctx);
  if (!o.quality.empty()) return run_quality(o, *model);
  const Tokenizer& tok = model->tokenizer();
  Engine engine(*model, o.engine);
  EngineOptions plain = o.engine;
  plain.retain = false;
  Engine scratch_engine(*model, plain);
  if (!o.json)
    std::printf("| module tokens | new tokens | prompt tokens | cached | TTFT cached ms | TTFT no-cache ms | speedup | encode s |\n"
                "|---|---|---|---|---|---|---|---|\n");
  for (int len : o.lengths) {
    // Text is built by whole words, so grow the module in steps of ~one word.
    const std::string name = "fig5_" + std::to_string(len);
    const std::string schema = "<schema name=\"" + name + "\"><system>You answer questions about the document.</system>"
                               "<user><module name=\"doc\">" + text_of(tok, len, len) + "</module></user></schema>";
    const SchemaInfo info = engine.register_schema(pml::parse_schema(schema, name));
    // --new counts every token computed: the new text and the chat
    // template's markup around it.
    const auto prompt_of = [&](int words) {
      return "<prompt schema=\"" + name + "\"><doc/><user>" + text_of(tok, words, 99) + "</user></prompt>";
    };
    const auto computed = [&](const std::string& p) {
      const Request q = engine.pml_request(p, true);
      int n = int(q.prompt.size());
      for (const CachedSpan& c : q.cached) n -= c.end - c.begin;
      return n;
    };
    const std::string prompt = prompt_of(std::max(1, 2 * o.new_tokens - computed(prompt_of(o.new_tokens))));
    std::vector<double> cached, scratch;
    int prompt_tokens = 0, cached_tokens = 0;
    for (int r = 0; r < o.reps + 1; ++r)  // the first round warms up
      for (bool use_cache : {true, false}) {
        if (!use_cache && o.cached_only) continue;
        Request q = engine.pml_request(prompt, use_cache);
        q.max_tokens = 1;
        q.ignore_eos = true;
        const Result res = (use_cache ? engine : scratch_engine).submit(std::move(q)).wait();
        if (res.completions[0].reason == FinishReason::kError) throw Error(res.completions[0].message);
        if (r == 0) continue;
        (use_cache ? cached : scratch).push_back(1000 * res.timings.ttft_s);
        if (use_cache) prompt_tokens = res.usage.prompt_tokens, cached_tokens = res.usage.cached_tokens;
      }
    engine.unregister_schema(name);
    const double c = median(cached), s = o.cached_only ? 0 : median(scratch);
    if (o.json)
      std::printf("{\"module_tokens\": %d, \"new_tokens\": %d, \"prompt_tokens\": %d, \"cached_tokens\": %d, "
                  "\"ttft_cached_ms\": %.2f, \"ttft_no_cache_ms\": %.2f, \"speedup\": %.2f, \"encode_s\": %.3f, "
                  "\"isa\": \"%s\"}\n",
                  info.tokens, prompt_tokens - cached_tokens, prompt_tokens, cached_tokens, c, s, s / c,
                  info.encode_s, isa_name(cpu_isa()));
    else
      std::printf("| %d | %d | %d | %d | %.1f | %.1f | %.1fx | %.2f |\n", info.tokens, prompt_tokens - cached_tokens,
                  prompt_tokens, cached_tokens, c, s, s / c, info.encode_s);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

Action add_bench_pml_command(CLI::App& bench) {
  auto o = std::make_shared<BenchPmlOptions>();
  CLI::App* c = bench.add_subcommand("pml", "Prompt Cache's Figure 5: time to first token, cached module vs from scratch");
  add_model_option(*c, o->model);
  add_device_option(*c, o->device);
  c->add_option("--lengths", o->lengths, "Module lengths in tokens")->check(int_in(1, 1 << 20));
  c->add_option("--new", o->new_tokens, "Tokens each prompt computes (new text and its chat markup)")->check(int_in(1, 4096));
  c->add_option("-r,--reps", o->reps, "Timed runs of each (median)")->check(int_in(1, 1000));
  c->add_flag("--json", o->json, "One JSON object per length");
  c->add_flag("--cached-only", o->cached_only, "Time the cached prompts only (for profiling)");
  c->add_option("--quality", o->quality,
                "Instead: greedy agreement, cached vs from scratch, of 32 prompts over the example schemas in this directory");
  add_engine_options(*c, o->engine, true);
  return [o] { return run(*o); };
}

}  // namespace cs
