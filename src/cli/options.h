// Options several subcommands share, and validators whose messages name the
// value and the range plainly (CLI11's own print the full range of a double
// and let nan through).
#pragma once
#include <memory>
#include <string>

#include "engine/engine.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace cs {

// A finite number in [lo, hi] (lo excluded when lo_open).
CLI::Validator finite_in(double lo, double hi, bool lo_open = false);
// An integer in [lo, hi].
CLI::Validator int_in(long long lo, long long hi);

// Parses a byte count: a number with an optional K, M, G (powers of 1024;
// KiB, MiB, GiB and KB, MB, GB are read the same). Throws cs::Error.
size_t parse_bytes(const std::string& text);

// --kv-type f16|bf16|f32.
void add_kv_type_option(CLI::App& cmd, KvType& type);
// The engine's options: --attention, --chunk-size, --kv-memory, --kv-type,
// --ctx, --threads (and, when `serving`, --max-batch and --step-tokens).
void add_engine_options(CLI::App& cmd, EngineOptions& o, bool serving);
// --chat-template FILE: a Jinja chat template that replaces the model file's.
void add_chat_template_option(CLI::App& cmd, std::string& file);
// -m/--model: a GGUF file, the default model when not given (model_path).
void add_model_option(CLI::App& cmd, std::string& path,
                      const char* help = "GGUF model file (default: the SmolLM2 model)");
// The file -m named, or default_model_path() when it was not given.
std::string model_path(const std::string& given);
// The file's bytes, or an Error naming `what` and the path.
std::string read_text_file(const std::string& path, const char* what);
// The model at `path` (the default model when empty) with the chat template
// of `template_file` when one is named; says on stderr, in one line, when the
// model's chat template is not the file's own (none in the file: ChatML).
// n_ctx: the context it will run at, when not the trained one
// (LlamaModel::set_context: a LongRoPE file's factors depend on it).
std::unique_ptr<LlamaModel> load_chat_model(const std::string& path, const std::string& template_file,
                                            const std::string& device = "cpu", int n_ctx = 0);
// --device cpu|cuda: where the model's layers run (default cpu; cuda:
// model/cuda_ops.h, the GPU's result equal to the CPU's bit for bit),
// --cuda-graphs on|off (base/launch_queue.h), and --numa off|interleave
// (base/numa.h; set as load_model starts).
void add_device_option(CLI::App& cmd, std::string& device);
// The model at `path` (the default model when empty) on `device`; a device
// that is not usable is an Error naming why.
std::unique_ptr<LlamaModel> load_model(const std::string& path, const std::string& device, int n_ctx = 0);

}  // namespace cs
