// `chunkserve serve`: load the model, start the engine, then serve the
// OpenAI-compatible API until SIGINT or SIGTERM (in-flight requests finish
// within the grace period; exit 0).
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "engine/schema_dir.h"
#include "server/server.h"

namespace cs {
namespace {

struct ServeOptions {
  std::string model;
  std::string device = "cpu";
  std::string chat_template;
  EngineOptions engine;
  ServerOptions server;
  double grace_s = 30;
  std::string log_format = "text";
};

// Registers the schemas saved in `dir`, saying what happened to each.
void restore_schemas(Engine& engine, const std::string& dir) {
  for (const SchemaDirEntry& e : restore_schema_dir(engine, dir)) {
    if (e.what == SchemaDirEntry::What::kRemovedTemporary) {
      std::fprintf(stderr, "chunkserve: removed %s: %s\n", e.path.c_str(), e.message.c_str());
      continue;
    }
    if (e.what == SchemaDirEntry::What::kSkipped) {
      std::fprintf(stderr, "chunkserve: schema %s skipped: %s\n", e.path.c_str(), e.message.c_str());
      continue;
    }
    std::fprintf(stderr, "chunkserve: schema '%s' %s (%d tokens, %.0f MiB, %.2f s)%s%s\n", e.name.c_str(),
                 e.what == SchemaDirEntry::What::kLoaded ? "loaded" : "encoded again", e.info.tokens,
                 double(e.info.bytes) / (1 << 20), e.info.encode_s, e.message.empty() ? "" : ": ", e.message.c_str());
  }
}

int run_serve(ServeOptions o) {
  // Signals go to one thread that waits for them; every thread started from
  // here (engine, HTTP workers) inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Memory that comes back: blocks of 1 MiB or more (an answer's JSON, its
  // logprobs) are mapped and unmapped on their own rather than kept in a
  // heap (glibc raises this threshold as it goes, which kept them), and the
  // hundred-odd HTTP workers share 8 arenas rather than one per core x 8.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 8);

  const std::string path = model_path(o.model);
  auto model = load_chat_model(path, o.chat_template, o.device, o.engine.n_ctx);
  if (o.server.model_id.empty()) o.server.model_id = std::filesystem::path(path).stem().string();
  if (o.server.api_key.empty())
    if (const char* k = std::getenv("CHUNKSERVE_API_KEY")) o.server.api_key = k;
  o.server.grace = std::chrono::milliseconds(long(o.grace_s * 1000));
  o.server.log_json = o.log_format == "json";
  o.server.worker.version = CHUNKSERVE_VERSION;
  o.server.worker.model_path = std::filesystem::absolute(path).string();
  // The publisher outlives the engine that feeds it.
  std::unique_ptr<KvEventPublisher> events;
  if (const KvEventOptions& ev = o.server.worker.kv_events; !ev.endpoint.empty()) {
    events = std::make_unique<KvEventPublisher>(ev);
    o.engine.kv_event_block_size = ev.block_size;
    o.engine.kv_events = [p = events.get()](std::vector<BlockEvent> batch) { p->publish(std::move(batch)); };
  }
  Engine engine(*model, o.engine);
  if (!engine.kv_note().empty()) std::fprintf(stderr, "chunkserve: %s\n", engine.kv_note().c_str());
  if (!o.server.schema_dir.empty()) restore_schemas(engine, o.server.schema_dir);
  Server server(engine, o.server);
  const int port = server.bind();
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "chunkserve: %s: finishing in-flight requests (up to %.0f s)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", o.grace_s);
    server.stop();
  });
  const EngineStats s = engine.stats();
  std::fprintf(stderr,
               "chunkserve: serving %s (%s attention, KV pool %zu MiB in %d chunks, up to %d sequences, %d threads)\n"
               "chunkserve: listening on http://%s:%d (OpenAI API under /v1)\n",
               o.server.model_id.c_str(), attn_mode_name(o.engine.mode), s.kv.bytes >> 20, s.kv.chunks,
               o.engine.max_batch, s.threads, o.server.host.c_str(), port);
  std::fflush(stderr);
  server.serve();
  // serve() also returns if listening fails: wake the waiter so it can end.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  std::fprintf(stderr, "chunkserve: stopped\n");
  return 0;
}

}  // namespace

Action add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* c = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
  add_model_option(*c, o->model);
  add_device_option(*c, o->device);
  add_chat_template_option(*c, o->chat_template);
  c->add_option("--host", o->server.host, "Address to listen on (default 127.0.0.1: this machine only)");
  c->add_option("--port", o->server.port, "Port (0: any free port)")->check(int_in(0, 65535));
  c->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' (or $CHUNKSERVE_API_KEY)");
  c->add_option("--alias", o->server.model_id, "Model name clients use (default: the file name without .gguf)");
  c->add_option("--parallel-http", o->server.http_threads, "HTTP worker threads (default: 4 x max batch + 8)")
      ->check(int_in(0, 4096));
  c->add_option("--max-waiting", o->engine.max_waiting, "Queued requests before 429 (default 4096)")
      ->check(int_in(1, 1 << 20));
  c->add_option("--grace", o->grace_s, "Seconds in-flight requests may take after SIGINT/SIGTERM")
      ->check(finite_in(0, 86400));
  c->add_option("--schema-dir", o->server.schema_dir,
                "Prompt Cache: save registered schemas here and register those saved here at start-up");
  c->add_option("--pml-src-dir", o->server.pml_src_dir,
                "Prompt Cache: schemas sent over HTTP may read <module src=FILE> from regular files below this "
                "directory (default: src= is refused)")
      ->check(CLI::ExistingDirectory);
  c->add_option("--grammar-budget", o->server.grammar_cpu_seconds,
                "CPU seconds a request's constraint (schema, regex, grammar, tools) may take to compile, in a child "
                "process at the lowest priority (3x that in wall time; default 10); over it: a 400 (the grammar of the "
                "calls a model may begin under tool_choice auto, with no tool strict: dropped, within 1x in wall time)")
      ->check(finite_in(0.1, 600));
  c->add_option("--responses-store", o->server.responses_max,
                "Responses API: responses kept for GET /v1/responses/{id} and previous_response_id, least recently "
                "used first out (default 1024; 0 keeps none)");
  c->add_option_function<std::string>(
      "--responses-store-size", [o](const std::string& s) { o->server.responses_max_bytes = parse_bytes(s); },
      "Responses API: bytes the stored responses may hold (default 256M)");
  c->add_flag("--tree-text", o->server.tree_text,
              "GET /v1/kv/tree (and the console) may show the cached text: every user's prompts and answers to "
              "anyone who can reach the port");
  c->add_option("--kv-events", o->server.worker.kv_events.endpoint,
                "Publish KV cache events in vLLM's format (msgpack over ZMQ PUB) on this endpoint, bound, for "
                "prefix-aware routers (e.g. tcp://127.0.0.1:5557)");
  c->add_option("--kv-events-replay", o->server.worker.kv_events.replay_endpoint,
                "ZMQ ROUTER endpoint where subscribers ask for the events they missed (vLLM's replay protocol)");
  c->add_option("--kv-events-topic", o->server.worker.kv_events.topic, "Topic (first frame) of each event message (default empty)");
  c->add_option("--kv-event-block-size", o->server.worker.kv_events.block_size,
                "Tokens per block in KV events: a divisor of the chunk size; routers must hash at the same size "
                "(default 16, vLLM's and the routers' default)")
      ->check(CLI::IsMember({1, 2, 4, 8, 16, 32, 64, 128, 256}));
  c->add_option("--root", o->server.worker.root,
                "What /v1/models and /server_info report as the model's root (a Hugging Face tokenizer directory for "
                "routers that tokenize; default: the model file)");
  c->add_option("--log-format", o->log_format, "Request log lines: text or json")->check(CLI::IsMember({"text", "json"}));
  add_engine_options(*c, o->engine, true);
  return [o] { return run_serve(*o); };
}

}  // namespace cs
