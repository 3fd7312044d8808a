// `chunkserve serve`: the OpenAI-compatible HTTP API over the engine
// (server/http_server on Boost.Beast for HTTP, nlohmann-json for JSON).
// Worker threads parse and
// check requests, submit them to the engine and stream what it returns; they
// never touch the model or the KV cache.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (streamed as
// server-sent events or not), Anthropic's POST /v1/messages and
// /v1/messages/count_tokens (server/messages_api.h), the Responses API's
// POST /v1/responses, GET and DELETE /v1/responses/{id}
// (server/responses_api.h), GET /v1/models, GET /health, POST /tokenize,
// POST /detokenize, GET /metrics; for routers (server/worker_info.h) GET
// /version, /server_info, /model_info, /get_load, /v1/loads and POST
// /flush_cache. Every invalid request gets a 4xx with
// OpenAI's error object; a client that disconnects mid-stream cancels its
// request. With an API key, everything but /health needs
// "Authorization: Bearer KEY".
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/worker_info.h"

namespace cs {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port
  std::string api_key;             // empty: no authentication
  std::string model_id;            // the name clients use
  int http_threads = 0;            // 0: 4 per sequence the engine runs at once, plus 8
  size_t max_body = 8 << 20;       // larger bodies get 413
  std::chrono::milliseconds grace{30000};  // on stop: how long in-flight requests may take
  bool log_json = false;           // one JSON object per request log line
  std::string schema_dir;          // Prompt Cache: schemas registered are saved here (and deleted with them)
  std::string pml_src_dir;         // <module src=FILE> of schemas sent over HTTP: only below this; empty = refused
  bool tree_text = false;          // GET /v1/kv/tree may show the cached text (everyone's prompts)
  // A request's constraint (schema, regex, grammar, tools) compiles in a
  // child process within these (grammar/compile_process.h); over them: a 400.
  double grammar_cpu_seconds = 10;
  size_t grammar_memory_bytes = size_t(1) << 30;
  // The Responses API's store (server/response_store.h): at most this many
  // responses and bytes, least recently used first out.
  size_t responses_max = 1024;
  size_t responses_max_bytes = size_t(256) << 20;
  WorkerIdentity worker;           // what /server_info and friends report (model_id is taken from above)
};

class Server {
 public:
  Server(Engine& engine, ServerOptions opt);
  ~Server();
  // Binds the listening socket; returns the port. Throws cs::Error.
  int bind();
  // Serves until stop(); returns after in-flight requests ended.
  void serve();
  // Thread-safe: stops taking requests (503), lets in-flight ones finish
  // within the grace period (then cancels them) and ends serve().
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cs
