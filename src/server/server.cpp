#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "server/api_request.h"
#include "server/api_response.h"
#include "server/kv_tree_json.h"
#include "server/metrics.h"
#include "base/parse_int.h"
#include "engine/schema_dir.h"
#include "pml/pml.h"

namespace cs {

extern const char kConsolePage[];  // src/server/console.html (cmake/embed.cmake)

using json = nlohmann::json;

namespace {

long long unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rng());
  return std::string(prefix) + buf;
}

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

struct Server::Impl {
  Impl(Engine& e, ServerOptions o) : engine(e), opt(std::move(o)) {
    const Tokenizer& tok = e.model().tokenizer();
    chat = ChatTemplate::detect(tok.chat_template(), tok.model());
    limits.tokenizer = &tok;
    limits.chat = &chat;
    limits.model_id = opt.model_id;
    limits.n_ctx = e.n_ctx();
    limits.max_n = e.options().max_batch;
    const int threads = opt.http_threads > 0 ? opt.http_threads : 4 * e.options().max_batch + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http.set_payload_max_length(opt.max_body);
    // Idle keep-alive connections are held this long, and a stopping server
    // waits for them: short, so SIGTERM ends the process promptly.
    http.set_keep_alive_timeout(2);
    routes();
  }

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void pml_prompt(ApiRequest& r);
  void schema_routes();
  void count(const std::string& route, int status) {
    std::lock_guard lock(mu);
    ++http_counts.responses[{route, status}];
  }
  void log(const std::string& route, int status, const std::string& id, const Result* r);

  Engine& engine;
  ServerOptions opt;
  ChatTemplate chat;
  ApiLimits limits;
  httplib::Server http;
  std::atomic<bool> draining{false};
  std::mutex mu;  // http_counts and the log
  HttpCounts http_counts;
};

void Server::Impl::log(const std::string& route, int status, const std::string& id, const Result* r) {
  std::lock_guard lock(mu);
  ++http_counts.responses[{route, status}];
  if (opt.log_json) {
    json j = {{"time", unix_now()}, {"id", id}, {"route", route}, {"status", status}};
    if (r) {
      j["prompt_tokens"] = r->usage.prompt_tokens;
      j["cached_tokens"] = r->usage.cached_tokens;
      j["completion_tokens"] = r->usage.completion_tokens;
      j["ttft_ms"] = 1000 * r->timings.ttft_s;
      j["total_ms"] = 1000 * r->timings.total_s;
      j["finish"] = r->completions.empty() ? "" : finish_reason_name(r->completions[0].reason);
      j["preemptions"] = r->preemptions;
    }
    std::fprintf(stderr, "%s\n", dump(j).c_str());
  } else if (r) {
    std::fprintf(stderr, "request %s %s %d prompt=%d cached=%d generated=%d ttft=%.0fms total=%.0fms finish=%s\n",
                 id.c_str(), route.c_str(), status, r->usage.prompt_tokens, r->usage.cached_tokens,
                 r->usage.completion_tokens, 1000 * r->timings.ttft_s, 1000 * r->timings.total_s,
                 r->completions.empty() ? "" : finish_reason_name(r->completions[0].reason));
  } else {
    std::fprintf(stderr, "request %s %s %d\n", id.empty() ? "-" : id.c_str(), route.c_str(), status);
  }
}

// Prompt Cache: the prompt a PML document assembles from its registered
// schema, with the request's sampling and limits.
void Server::Impl::pml_prompt(ApiRequest& r) {
  Request built;
  try {
    built = engine.pml_request(r.pml, r.pml_cache, "pml");
  } catch (const pml::PmlError& e) {
    const std::string what = e.what();
    const bool unknown = what.find("is not registered") != std::string::npos;
    throw ApiError{unknown ? 404 : 400, what, "invalid_request_error", "pml", unknown ? "schema_not_found" : "invalid_pml"};
  }
  const Request& q = r.engine;
  built.sampling = q.sampling;
  built.stop = q.stop;
  built.n = q.n;
  built.logprobs = q.logprobs;
  r.engine = std::move(built);
  check_context(r, limits);
  std::lock_guard lock(mu);
  ++http_counts.pml_requests[r.engine.cached.empty() ? "(no cache)" : "cached"];
}

void Server::Impl::schema_routes() {
  auto info_json = [](const SchemaInfo& s) {
    return json{{"object", "schema"},        {"name", s.name},         {"positions", s.positions},
                {"tokens", s.tokens},        {"modules", s.modules},   {"scaffolds", s.scaffolds},
                {"bytes", s.bytes},          {"encode_seconds", s.encode_s}, {"restored", s.restored}};
  };
  http.Post("/v1/schemas", [this, info_json](const httplib::Request& req, httplib::Response& res) {
    try {
      pml::Schema schema = pml::parse_schema(req.body, "schema");
      const SchemaInfo info = opt.schema_dir.empty()
                                  ? engine.register_schema(std::move(schema))
                                  : register_saved_schema(engine, std::move(schema), opt.schema_dir);
      json body = info_json(info);
      body["saved"] = !opt.schema_dir.empty();
      res.set_content(dump(body), "application/json");
      count("/v1/schemas", 200);
    } catch (const pml::PmlError& e) {
      reply_error(res, {400, e.what(), "invalid_request_error", "", "invalid_pml"});
      count("/v1/schemas", 400);
    } catch (const Error& e) {
      const bool dup = std::string(e.what()).find("already registered") != std::string::npos;
      reply_error(res, {dup ? 409 : 400, e.what(), "invalid_request_error", "", dup ? "schema_exists" : ""});
      count("/v1/schemas", dup ? 409 : 400);
    }
  });
  http.Get("/v1/schemas", [this, info_json](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const SchemaInfo& s : engine.schemas()) data.push_back(info_json(s));
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
    count("/v1/schemas", 200);
  });
  http.Delete(R"(/v1/schemas/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    try {
      engine.unregister_schema(name);
      json body = {{"object", "schema"}, {"name", name}, {"deleted", true}};
      if (!opt.schema_dir.empty()) try {
          remove_saved_schema(opt.schema_dir, name);
        } catch (const Error& e) {  // unregistered all the same; say what is left on disk
          body["saved_copy"] = e.what();
        }
      res.set_content(dump(body), "application/json");
      count("/v1/schemas", 200);
    } catch (const Error& e) {
      const bool in_use = std::string(e.what()).find("in use") != std::string::npos;
      reply_error(res, {in_use ? 409 : 404, e.what(), "invalid_request_error", "", in_use ? "schema_in_use" : "schema_not_found"});
      count("/v1/schemas", in_use ? 409 : 404);
    }
  });
}

// A streamed answer: the request, its responder and its handle live until
// the stream ends (or the client goes, which cancels the request).
struct Stream {
  ApiRequest req;
  std::unique_ptr<ApiResponder> out;
  RequestHandle handle;
  std::string route;
};

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res, bool is_chat) {
  const std::string route = is_chat ? "/v1/chat/completions" : "/v1/completions";
  auto st = std::make_shared<Stream>();
  st->route = route;
  const std::string id = random_id(is_chat ? "chatcmpl-" : "cmpl-");
  try {
    st->req = is_chat ? parse_chat_request(req.body, limits) : parse_completion_request(req.body, limits);
    if (!st->req.pml.empty()) pml_prompt(st->req);
    st->handle = engine.submit(st->req.engine);
  } catch (const ApiError& e) {
    reply_error(res, e);
    log(route, e.status, id, nullptr);
    return;
  } catch (const RequestError& e) {
    ApiError err{400, e.what(), "invalid_request_error", e.param(), ""};
    if (e.kind() == RequestError::Kind::kBusy) {
      err.status = 429, err.type = "rate_limit_error", err.code = "too_many_waiting";
      res.set_header("Retry-After", "1");
    } else if (e.kind() == RequestError::Kind::kUnavailable) {
      err.status = 503, err.type = "server_error", err.code = "shutting_down";
    }
    reply_error(res, err);
    log(route, err.status, id, nullptr);
    return;
  }
  st->out = std::make_unique<ApiResponder>(st->req, engine.model().tokenizer(), id, unix_now());
  if (!st->req.stream) {
    const Result r = st->handle.wait();
    for (const Completion& c : r.completions)
      if (c.reason == FinishReason::kError) {
        reply_error(res, {500, c.message, "server_error", "", ""});
        log(route, 500, id, &r);
        return;
      }
    res.set_content(st->out->response(r), "application/json");
    log(route, 200, id, &r);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        auto write = [&sink](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
        for (;;) {
          auto ev = st->handle.next(std::chrono::milliseconds(1000));
          if (ev) {
            const std::string c = st->out->chunk(*ev);
            if (!c.empty() && !write(c)) return false;  // the client went: the handle cancels
            continue;
          }
          if (!st->handle.done()) {
            // Quiet (queued, or a long prefill): an SSE comment finds out
            // whether the client is still there.
            if (!write(": keep-alive\n\n")) return false;
            continue;
          }
          const Result r = st->handle.wait();
          if (st->req.include_usage && !write(st->out->usage_chunk(r))) return false;
          if (!write(ApiResponder::done())) return false;
          sink.done();
          return true;
        }
      },
      [this, st, id](bool ok) {
        if (!ok) st->handle.cancel();
        const Result r = st->handle.wait();
        log(st->route, ok ? 200 : 499, id, &r);
      });
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The console's page holds no data (its calls carry the key).
    if (req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
    if (!opt.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + opt.api_key) {
      reply_error(res, {401, "missing or wrong API key (Authorization: Bearer KEY)", "invalid_request_error", "",
                        "invalid_api_key"});
      count(req.path, 401);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining && req.path.rfind("/v1/", 0) == 0) {
      reply_error(res, {503, "the server is shutting down", "server_error", "", "shutting_down"});
      count(req.path, 503);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.status = draining ? 503 : 200;
    res.set_content(draining ? R"({"status":"draining"})" : R"({"status":"ok"})", "application/json");
  });
  http.Get("/", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(kConsolePage, "text/html; charset=utf-8");
    count("/", 200);
  });
  http.Get("/v1/kv/tree", [this](const httplib::Request& req, httplib::Response& res) {
    // ?max_nodes=N (1-512, default 256), ?text=T tokens of text per node (0-48, default 24)
    const auto param = [&](const char* name, int lo, int hi, int dflt) {
      if (!req.has_param(name)) return dflt;
      const std::string v = req.get_param_value(name);
      const std::optional<long> n = parse_long(v);
      if (!n || *n < lo || *n > hi)
        throw ApiError{400, std::string(name) + "=" + v + ": expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]",
                       "invalid_request_error", name, "invalid_value"};
      return int(*n);
    };
    try {
      const int max_nodes = param("max_nodes", 1, Engine::kTreeNodes, 256);
      // The cached text is every user's prompts and answers: shown only when the operator says so.
      const int text = param("text", 0, Engine::kTreeHead, opt.tree_text ? 24 : 0);
      if (text > 0 && !opt.tree_text)
        throw ApiError{403, "text=" + std::to_string(text) +
                                ": this server does not show cached text (it holds every user's prompts); its "
                                "operator can allow it with serve --tree-text",
                       "permission_error", "text", "tree_text_disabled"};
      json tree = kv_tree_json(*engine.kv_tree(), engine.model().tokenizer(), max_nodes, text);
      tree["text_shown"] = opt.tree_text;
      res.set_content(dump(tree), "application/json");
      count("/v1/kv/tree", 200);
    } catch (const ApiError& e) {
      reply_error(res, e);
      count("/v1/kv/tree", e.status);
    }
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", opt.model_id},
              {"object", "model"},
              {"created", unix_now()},
              {"owned_by", "chunkserve"},
              {"max_model_len", engine.n_ctx()}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
    count("/v1/models", 200);
  });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const Tokenizer& tok = engine.model().tokenizer();
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("content") || !j["content"].is_string())
      return reply_error(res, {400, "the body must be {\"content\": string, \"add_special\": bool}", "invalid_request_error",
                               "content", ""});
    const bool special = j.value("add_special", false) == true;
    const auto ids = tok.encode(j["content"].get<std::string>(), special, special);
    json out = json::array();
    if (j.value("with_pieces", false) == true)
      for (int32_t id : ids) out.push_back({{"id", id}, {"piece", tok.piece(id)}});
    else
      out = ids;
    res.set_content(dump({{"tokens", out}}), "application/json");
    count("/tokenize", 200);
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    const Tokenizer& tok = engine.model().tokenizer();
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
      return reply_error(res, {400, "the body must be {\"tokens\": [ids]}", "invalid_request_error", "tokens", ""});
    std::vector<int32_t> ids;
    for (const json& t : j["tokens"]) {
      if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= tok.vocab_size())
        return reply_error(res, {400, "token " + dump(t) + " is not in the vocabulary (0 to " +
                                          std::to_string(tok.vocab_size() - 1) + ")",
                                 "invalid_request_error", "tokens", ""});
      ids.push_back(int32_t(t.get<long long>()));
    }
    res.set_content(dump({{"content", tok.decode(ids)}}), "application/json");
    count("/detokenize", 200);
  });
  schema_routes();
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    HttpCounts counts;
    {
      std::lock_guard lock(mu);
      counts = http_counts;
    }
    res.set_content(prometheus_text(engine.stats(), counts, opt.model_id, engine.schemas()), "text/plain; version=0.0.4");
  });
  // Errors httplib produces itself (unknown route, body too large, bad
  // HTTP) get OpenAI's error object too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = "HTTP " + std::to_string(res.status);
    if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
    if (res.status == 405) msg = "method " + req.method + " not allowed on " + req.path;
    if (res.status == 413) msg = "the body is larger than " + std::to_string(opt.max_body) + " bytes";
    const int status = res.status;
    reply_error(res, {status, msg, "invalid_request_error", "", ""});
    count(req.path, status);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, {500, what, "server_error", "", ""});
  });
}

Server::Server(Engine& engine, ServerOptions opt) : impl_(std::make_unique<Impl>(engine, std::move(opt))) {}
Server::~Server() = default;

int Server::bind() {
  Impl& m = *impl_;
  const int port = m.opt.port == 0 ? m.http.bind_to_any_port(m.opt.host) : (m.http.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (port < 0) throw Error("cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port));
  return port;
}

void Server::serve() { impl_->http.listen_after_bind(); }

void Server::stop() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  m.engine.shutdown(m.opt.grace);  // in-flight requests finish (or are cancelled at the end)
  m.http.stop();
}

}  // namespace cs
