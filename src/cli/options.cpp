#include "cli/options.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "base/cuda.h"
#include "base/numa.h"
#include "cli/commands.h"
#include "model/cuda_ops.h"
#include "model/llama.h"

namespace cs {
namespace {

// --numa, applied as a model loads (load_model).
NumaPolicy g_numa = NumaPolicy::kOff;

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

CLI::Validator finite_in(double lo, double hi, bool lo_open) {
  const std::string range = (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        double v;
        size_t used = 0;
        try {
          v = std::stod(in, &used);
        } catch (...) {
          return "'" + in + "' is not a number";
        }
        if (used != in.size()) return "'" + in + "' is not a number";
        if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo))
          return in + " is not a number in " + range;
        return {};
      },
      "NUMBER in " + range);
}

CLI::Validator int_in(long long lo, long long hi) {
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        long long v;
        size_t used = 0;
        try {
          v = std::stoll(in, &used);
        } catch (...) {
          return "'" + in + "' is not an integer";
        }
        if (used != in.size()) return "'" + in + "' is not an integer";
        if (v < lo || v > hi) return in + " is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

size_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double v;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    throw Error("'" + text + "' is not a byte count (e.g. 512M, 2G)");
  }
  std::string unit = text.substr(used);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> scale = {
      {"", 1},           {"B", 1},          {"K", 1024.0},         {"KB", 1024.0},        {"KIB", 1024.0},
      {"M", 1048576.0},  {"MB", 1048576.0}, {"MIB", 1048576.0},    {"G", 1073741824.0},   {"GB", 1073741824.0},
      {"GIB", 1073741824.0}};
  const auto it = scale.find(unit);
  if (it == scale.end() || !std::isfinite(v) || v <= 0 || v * it->second > 1e15)
    throw Error("'" + text + "' is not a byte count (e.g. 512M, 2G)");
  return size_t(v * it->second);
}

void add_kv_type_option(CLI::App& cmd, KvType& type) {
  std::map<std::string, KvType> names;
  for (KvType t : {KvType::kF16, KvType::kBF16, KvType::kF32}) names[kv_type_name(t)] = t;
  cmd.add_option_function<std::string>(
         "--kv-type", [&type, names](const std::string& name) { type = names.at(name); },
         "KV cache element type: f16 (default, as llama.cpp's), bf16 or f32")
      ->check(CLI::IsMember(names));
}

void add_engine_options(CLI::App& cmd, EngineOptions& o, bool serving) {
  cmd.add_option_function<std::string>(
         "--attention", [&o](const std::string& name) { o.mode = *attn_mode_from(name); },
         "How sequences share KV: tpp (two-phase partition, default), per-sequence, relay, none")
      ->check(CLI::IsMember({"tpp", "per-sequence", "relay", "none"}));
  cmd.add_option("--chunk-size", o.chunk_size, "Tokens per KV chunk (64, 128, 192 or 256)")
      ->check(CLI::IsMember({64, 128, 192, 256}));
  cmd.add_option_function<std::string>(
      "--kv-memory", [&o](const std::string& s) { o.kv_memory = parse_bytes(s); },
      "KV pool size, e.g. 512M or 2G (default: max batch x context, at most 2G)");
  add_kv_type_option(cmd, o.kv_type);
  cmd.add_option("--kv-disk", o.kv_disk,
                 "Disk tier: a directory keeping KV chunks the pool lets go of, and shared prefixes, across restarts");
  cmd.add_option_function<std::string>(
      "--kv-disk-size", [&o](const std::string& s) { o.kv_disk_bytes = parse_bytes(s); },
      "The disk tier's size, e.g. 20G (default 8G); its least recently used chunks go beyond it");
  cmd.add_option("--ctx", o.n_ctx, "Context per sequence (default: the model's)")->check(int_in(0, 1 << 24));
  cmd.add_option("-t,--threads", o.threads, "Compute threads at most (0 = the available cores)")
      ->check(int_in(0, 4096));
  cmd.add_option_function<std::string>(
         "--speculate", [&o](const std::string& s) { o.speculate = s == "auto"; },
         "Speculative decoding from drafts the server holds (the prompt, the output, a request's prediction): "
         "auto (default: in steps of few sequences) or off; a request's 'speculate' overrides it")
      ->check(CLI::IsMember({"off", "auto"}));
  if (serving) {
    cmd.add_option("--max-batch", o.max_batch, "Running sequences at most")->check(int_in(1, 1024));
    cmd.add_option("--step-tokens", o.step_tokens, "Tokens per forward pass (decode + prefill chunks)")
        ->check(int_in(1, 65536));
    cmd.add_option_function<std::string>(
        "--cache-hold-memory", [&o](const std::string& s) { o.hold_memory = parse_bytes(s); },
        "KV the prefixes held for cache_control breakpoints (Messages API) may keep, e.g. 256M (default: a "
        "quarter of the pool); the oldest holds give way beyond it");
  }
}

}  // namespace cs

namespace cs {

void add_chat_template_option(CLI::App& cmd, std::string& file) {
  cmd.add_option("--chat-template", file, "A Jinja chat template file that replaces the model's own")
      ->check(CLI::ExistingFile);
}

void add_model_option(CLI::App& cmd, std::string& path, const char* help) { cmd.add_option("-m,--model", path, help); }

std::string model_path(const std::string& given) { return given.empty() ? default_model_path() : given; }

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(std::string("cannot read the ") + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void add_device_option(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device, "Where the model's layers run: cpu (default) or cuda (an NVIDIA GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd.add_option_function<std::string>(
         "--cuda-graphs", [](const std::string& v) { cuda::set_graphs(v == "on"); },
         "With --device cuda: a step's kernel launches replayed as CUDA graphs (on, the default) or launched one by "
         "one (off)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd.add_option_function<std::string>(
         "--numa", [](const std::string& v) { g_numa = numa_policy_named(v); },
         "Where the weights' and the KV pool's pages live on a machine of several NUMA nodes: off (the default: "
         "where first written) or interleave (page by page over every node; docs/deploy.md)")
      ->check(CLI::IsMember({"off", "interleave"}));
}

std::unique_ptr<LlamaModel> load_model(const std::string& path, const std::string& device, int n_ctx) {
  set_numa_policy(g_numa);  // before the weights are repacked
  auto model = LlamaModel::load(model_path(path), device == "cuda" ? cuda_backend() : cpu_backend());
  if (n_ctx > 0) model->set_context(n_ctx);
  return model;
}

std::unique_ptr<LlamaModel> load_chat_model(const std::string& path, const std::string& template_file,
                                            const std::string& device, int n_ctx) {
  auto model = load_model(path, device, n_ctx);
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw Error("cannot read the chat template '" + template_file + "'");
    try {
      model->set_chat_template(text.str());
    } catch (const jinja::TemplateError& e) {
      throw Error("the chat template '" + template_file + "': " + e.what());
    }
  } else if (!model->chat_note().empty()) {
    std::fprintf(stderr, "chunkserve: %s\n", model->chat_note().c_str());
  }
  return model;
}

}  // namespace cs
