// `chunkserve perplexity`: perplexity of the model over a text, windowed as
// llama-perplexity does (model/perplexity.h), with its running estimate on
// stderr; --reference scores the float reference instead, and
// --kl-against-reference measures how far the fast path's next-token
// distributions are from the reference's.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "model/perplexity.h"

namespace cs {
namespace {

struct PerplexityOptionsCli {
  std::string model, file;
  int n_ctx = 512, chunks = 0, threads = 0;
  KvType kv_type = KvType::kF16;
  bool json = false, reference = false, kl = false;
  std::string kl_base;  // write the scored distributions for llama-perplexity --kl-divergence
  std::string device = "cpu";
};

// The default corpus: the ChunkAttention and Prompt Cache papers
// (../shared/papers/000_* and 003_*), concatenated.
std::string default_corpus() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(CHUNKSERVE_SOURCE_DIR) / ".." / "shared" / "papers";
  std::string text;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("000_", 0) == 0 || name.rfind("003_", 0) == 0) files.push_back(e.path());
  }
  if (files.size() != 2) throw Error("give a text with -f FILE (the default corpus, papers 000_* and 003_* in " +
                                     dir.lexically_normal().string() + ", is not there)");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  return text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int run(const PerplexityOptionsCli& o) {
  set_threads(o.threads);
  auto model = load_model(o.model, o.device, o.n_ctx);
  if (o.n_ctx > model->config().n_ctx_train)
    throw Error("--ctx " + std::to_string(o.n_ctx) + " is larger than the model's trained context of " +
                std::to_string(model->config().n_ctx_train) + " tokens");
  const std::string text = o.file.empty() ? default_corpus() : read_text(o.file);
  const Tokenizer& tok = model->tokenizer();
  const std::vector<int32_t> tokens = tok.encode(text, false, true);
  std::unique_ptr<ReferenceModel> ref;
  if (o.reference || o.kl) ref = std::make_unique<ReferenceModel>(*model);
  PerplexityOptions p;
  p.n_ctx = o.n_ctx;
  p.max_windows = o.chunks;
  p.kv_type = o.kv_type;
  if (o.reference) p.score_with = ref.get();
  if (o.kl) p.kl_against = ref.get();
  std::ofstream kl_base;
  if (!o.kl_base.empty()) {
    kl_base.open(o.kl_base, std::ios::binary | std::ios::trunc);
    if (!kl_base) throw Error("cannot write '" + o.kl_base + "'");
    p.kl_base = &kl_base;
  }
  p.progress = [](int w, int n, double ppl) { std::fprintf(stderr, "\r[%d/%d] PPL %.4f", w, n, ppl); };
  const PerplexityResult r = perplexity(*model, tokens, p);
  std::fprintf(stderr, "\n");
  std::vector<double> kl = r.kl;
  std::sort(kl.begin(), kl.end());
  double kl_mean = 0, kl_sq = 0;
  for (double v : kl) kl_mean += v, kl_sq += v * v;
  double kl_error = 0;  // standard error of the mean
  if (kl.size() > 1) {
    kl_mean /= double(kl.size());
    kl_error = std::sqrt(std::max(0.0, kl_sq / double(kl.size()) - kl_mean * kl_mean) / double(kl.size() - 1));
  }
  const double kl_p99 = kl.empty() ? 0 : kl[std::min(kl.size() - 1, size_t(0.99 * double(kl.size())))];
  const double differ = kl.empty() ? 0 : double(r.top1_differ) / double(kl.size());
  const char* path = o.reference ? "reference" : "fast";
  if (o.json) {
    std::printf("{\"path\": \"%s\", \"ctx\": %d, \"windows\": %d, \"tokens_scored\": %lld, \"ppl\": %.6f, "
                "\"ppl_error\": %.6f",
                path, o.n_ctx, r.windows, (long long)r.count, r.ppl(), r.ppl_error());
    if (o.kl)
      std::printf(", \"reference_ppl\": %.6f, \"kl_mean\": %.6g, \"kl_mean_error\": %.3g, \"kl_p99\": %.6g, "
                  "\"top1_differ\": %.6f",
                  r.ref_ppl(), kl_mean, kl_error, kl_p99, differ);
    std::printf("}\n");
  } else {
    std::printf("PPL = %.4f +/- %.5f (%s path; %d windows of %d tokens, %lld tokens scored)\n", r.ppl(), r.ppl_error(),
                path, r.windows, o.n_ctx, (long long)r.count);
    if (o.kl)
      std::printf("reference PPL = %.4f; KL(reference || fast): mean %.6f +/- %.6f, p99 %.6f nats; top-1 token differs "
                  "at %.2f%% of positions\n",
                  r.ref_ppl(), kl_mean, kl_error, kl_p99, 100 * differ);
  }
  return 0;
}

}  // namespace

Action add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptionsCli>();
  CLI::App* c = app.add_subcommand("perplexity", "Perplexity of the model over a text (llama-perplexity's windows)");
  add_model_option(*c, o->model);
  add_device_option(*c, o->device);
  c->add_option("-f,--file", o->file, "Text file (default: the ChunkAttention and Prompt Cache papers)");
  c->add_option("--ctx", o->n_ctx, "Window size in tokens; each window's second half is scored")->check(int_in(4, 1 << 20));
  c->add_option("--chunks", o->chunks, "Windows at most (0: all)")->check(int_in(0, 1 << 24));
  c->add_option("--threads", o->threads, "Compute threads (0: the cores available)")->check(int_in(0, 4096));
  add_kv_type_option(*c, o->kv_type);
  c->add_flag("--reference", o->reference, "Score the float reference (fp32 weights and activations) instead");
  c->add_flag("--kl-against-reference", o->kl,
              "Also the KL divergence of the fast path's next-token distributions from the reference's");
  c->add_option("--save-kl-base", o->kl_base,
                 "Write the scored distributions in llama-perplexity's --kl-divergence-base format");
  c->add_flag("--json", o->json, "One JSON object");
  return [o] { return run(*o); };
}

}  // namespace cs
