#include "server/server.h"

#include <openssl/crypto.h>

#include <malloc.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "base/json_depth.h"
#include "base/parse_int.h"
#include "base/sha256.h"
#include "engine/schema_dir.h"
#include "engine/scheduler.h"
#include "pml/pml.h"
#include "server/api_request.h"
#include "server/api_response.h"
#include "server/http_server.h"
#include "server/kv_tree_json.h"
#include "server/messages_api.h"
#include "server/reasoning.h"
#include "server/responses_api.h"
#include "server/metrics.h"

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

// Anthropic's routes answer errors in their API's shape, the rest OpenAI's.
bool anthropic_route(const std::string& path) { return path == "/v1/messages" || path.starts_with("/v1/messages/"); }

void reply_error(HttpResponse& res, const ApiError& e, bool anthropic = false) {
  res.status = e.status;
  res.content_type = "application/json";
  res.body = anthropic ? messages_error_json(e) : error_json(e);
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string digest(const std::string& s) { return sha256_hex({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }

// The credentials of an Authorization header: "Bearer KEY", the scheme in
// any case (RFC 9110 makes it case-insensitive), spaces or tabs around the
// key; "" for another scheme or none.
std::string bearer_token(const std::string& h) {
  const size_t s0 = h.find_first_not_of(" \t");
  if (s0 == std::string::npos) return "";
  const size_t s1 = h.find_first_of(" \t", s0);
  if (s1 == std::string::npos || s1 - s0 != 6) return "";
  for (size_t i = 0; i < 6; ++i)
    if (std::tolower(static_cast<unsigned char>(h[s0 + i])) != "bearer"[i]) return "";
  const size_t k0 = h.find_first_not_of(" \t", s1);
  if (k0 == std::string::npos) return "";
  return h.substr(k0, h.find_last_not_of(" \t") - k0 + 1);
}

// Whether `key` is the key whose digest is `expected`, in time that does
// not depend on where they differ (digests compared, so not on lengths
// either).
bool is_key(const std::string& key, const std::string& expected) {
  const std::string d = digest(key);
  return CRYPTO_memcmp(d.data(), expected.data(), d.size()) == 0;
}

// A 4xx for a request the engine refused (RequestError's kind, not its text).
ApiError refused(const RequestError& e, HttpResponse& res) {
  ApiError err{400, e.what(), "invalid_request_error", e.param(), ""};
  if (e.kind() == RequestError::Kind::kBusy) {
    err.status = 429, err.type = "rate_limit_error", err.code = "too_many_waiting";
    res.headers.emplace_back("Retry-After", "1");
  } else if (e.kind() == RequestError::Kind::kUnavailable) {
    err.status = 503, err.type = "server_error", err.code = "shutting_down";
  }
  return err;
}

// What a handler tells the log besides its status (a stream's status: 200
// when the client got all of it, else 499).
struct Outcome {
  std::string id;
  std::optional<Result> result;
};

using RouteFn = std::function<void(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&)>;

// After answers this large, or with this many logprob entries (each token's
// and its alternatives'), the worker gives its free memory back (add()).
constexpr size_t kTrimAfterBytes = 1 << 20, kTrimAfterLogprobs = 10000;

size_t logprob_entries(const Result& r) {
  size_t n = 0;
  for (const Completion& c : r.completions)
    for (const TokenLogprobs& t : c.logprobs) n += 1 + t.top.size();
  return n;
}

}  // namespace

struct Server::Impl {
  Impl(Engine& e, ServerOptions o)
      : engine(e), opt(std::move(o)), responses(opt.responses_max, opt.responses_max_bytes), http(http_options(e, opt)) {
    opt.worker.model_id = opt.model_id;
    if (opt.worker.root.empty()) opt.worker.root = opt.worker.model_path;
    const Tokenizer& tok = e.model().tokenizer();
    limits.tokenizer = &tok;
    limits.chat = &e.model().chat();
    limits.model_id = opt.model_id;
    limits.n_ctx = e.n_ctx();
    limits.max_n = e.options().max_batch;
    limits.tools = tool_syntax(e.model().chat().source());
    if (e.model().has_tool_template()) add_tool_template(limits, e.model().chat_for_tools());
    // Where a reply may open a thought, its first tokens ask which tokens
    // write the opening (Tokenizer::tokens_continuing): its index is built
    // now, not in the step of the first such request.
    if (template_thinks(limits.chat->source()) || template_has_channels(limits.chat->source()))
      (void)tok.tokens_continuing("");
    if (!opt.api_key.empty()) key_digest = digest(opt.api_key);
    routes();
  }

  static HttpOptions http_options(const Engine& e, const ServerOptions& o) {
    HttpOptions h;
    h.host = o.host;
    h.port = o.port;
    h.workers = o.http_threads > 0 ? o.http_threads : 4 * e.options().max_batch + 8;
    h.body_limit = o.max_body;
    return h;
  }

  void routes();
  void add(const char* method, const std::string& path, RouteFn fn, bool prefix = false);
  bool before(const HttpRequest& req, HttpResponse& res);
  HttpResponse transport_error(const HttpRequest* req, int status, const std::string& message);

  void health(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void kv_tree(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void models(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void generate(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&, bool chat);
  void messages(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void count_tokens(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void responses_post(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void responses_get(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void responses_delete(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  RequestHandle submit(ApiRequest& ar, HttpResponse& res, const HttpExchange& ex);
  bool wait_whole(RequestHandle& h, HttpResponse& res, HttpExchange& ex, Outcome& o);
  template <class Events>
  void stream(Events& events, int n, RequestHandle& h, HttpResponse& res, HttpExchange& ex, Outcome& o);
  void tokenize(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void detokenize(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void schema_post(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void schema_list(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void schema_delete(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void metrics(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void flush_cache(const HttpRequest&, HttpResponse&, HttpExchange&, Outcome&);
  void pml_prompt(ApiRequest& r);
  void constrain(ApiRequest& r, HttpResponse& res, const HttpExchange& ex);
  void log(const std::string& route, int status, const std::string& id, const Result* r);
  // The label a path is logged and counted under: a route's name, or
  // "(other)", so that no request can add labels to /metrics at will.
  std::string route_name(const std::string& path) const;

  Engine& engine;
  ServerOptions opt;
  ApiLimits limits;
  ResponseStore responses;  // the Responses API's stored responses
  std::string key_digest;  // of the key, when one is set
  HttpServer http;
  std::atomic<bool> draining{false};
  // State below is protected by `mu`: the counts and the log's lines.
  std::mutex mu;
  HttpCounts http_counts;
  // The routes' paths (prefix routes' with a trailing flag), set before serving.
  std::vector<std::pair<std::string, bool>> known;
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
      if (r->paused) j["paused"] = r->paused;
    }
    std::fprintf(stderr, "%s\n", dump(j).c_str());
  } else if (r) {
    std::fprintf(stderr, "request %s %s %d prompt=%d cached=%d generated=%d ttft=%.0fms total=%.0fms finish=%s%s\n",
                 id.c_str(), route.c_str(), status, r->usage.prompt_tokens, r->usage.cached_tokens,
                 r->usage.completion_tokens, 1000 * r->timings.ttft_s, 1000 * r->timings.total_s,
                 r->completions.empty() ? "" : finish_reason_name(r->completions[0].reason),
                 r->paused ? (" paused=" + std::to_string(r->paused) + " (its client left " +
                              std::to_string(kPauseBacklog) + " events unread)").c_str()
                           : "");
  } else {
    std::fprintf(stderr, "request %s %s %d\n", id.empty() ? "-" : id.c_str(), route.c_str(), status);
  }
}

// Every route's response is logged and counted under its route's name;
// client mistakes are ApiErrors (4xx), anything else a logged 500.
std::string Server::Impl::route_name(const std::string& path) const {
  for (const auto& [p, prefix] : known)
    if (prefix ? path.starts_with(p) : path == p) return prefix ? p + "{name}" : p;
  return "(other)";
}

void Server::Impl::add(const char* method, const std::string& path, RouteFn fn, bool prefix) {
  known.emplace_back(path, prefix);
  const std::string name = prefix ? path + "{name}" : path;
  http.route(method, path, [this, fn = std::move(fn), name](const HttpRequest& req, HttpResponse& res, HttpExchange& ex) {
    bool large = false;
    {
      Outcome o;
      const bool anthropic = anthropic_route(req.path);
      try {
        fn(req, res, ex, o);
      } catch (const ApiError& e) {
        reply_error(res, e, anthropic);
      } catch (const std::exception& e) {
        reply_error(res, {500, std::string("internal error: ") + e.what(), "server_error", "", ""}, anthropic);
      }
      log(name, res.status, o.id, o.result ? &*o.result : nullptr);
      large = res.body.size() >= kTrimAfterBytes || (o.result && logprob_entries(*o.result) >= kTrimAfterLogprobs);
    }
    // A large answer (logprobs of many tokens and completions: tens of MB of
    // JSON built and freed on this worker thread) leaves its memory in this
    // thread's malloc arena, which glibc keeps; with a hundred workers RSS
    // only grew. Giving the free pages back after such an answer keeps it
    // level (one pass over the arenas, milliseconds, for a rare answer;
    // serve also fixes malloc's mmap threshold, so the answer's own buffers
    // of 1 MiB or more go back when they are freed).
    if (large) malloc_trim(0);
  }, prefix);
}

bool Server::Impl::before(const HttpRequest& req, HttpResponse& res) {
  // The console's page holds no data (its calls carry the key).
  if (req.path == "/health" || req.path == "/") return false;
  const bool anthropic = anthropic_route(req.path);
  // The key as OpenAI's clients send it (Authorization: Bearer) or as
  // Anthropic's do (x-api-key).
  if (!key_digest.empty() && !is_key(bearer_token(req.header("Authorization")), key_digest) &&
      !is_key(req.header("x-api-key"), key_digest)) {
    reply_error(res, {401, "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)",
                      "invalid_request_error", "", "invalid_api_key"},
                anthropic);
    log(route_name(req.path), 401, "", nullptr);
    return true;
  }
  if (draining && req.path.starts_with("/v1/")) {
    reply_error(res, {503, "the server is shutting down", "server_error", "", "shutting_down"}, anthropic);
    log(route_name(req.path), 503, "", nullptr);
    return true;
  }
  return false;
}

// Errors of the HTTP layer itself (unknown route, a body too large, bad
// HTTP): OpenAI's error object too, logged and counted.
HttpResponse Server::Impl::transport_error(const HttpRequest* req, int status, const std::string& message) {
  HttpResponse res;
  std::string code;
  if (status == 413) code = "body_too_large";
  if (status == 431) code = "headers_too_large";
  if (status == 408) code = "request_timeout";
  reply_error(res, {status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code},
              req && anthropic_route(req->path));
  log(req ? route_name(req->path) : "(other)", status, "", nullptr);
  return res;
}

// A PML document's error (it has a location) is invalid_pml; others name no code.
static std::string pml_code(const Status& s) { return s.location.empty() ? "" : "invalid_pml"; }

// Prompt Cache: the prompt a PML document assembles from its registered
// schema, with the request's sampling and limits.
void Server::Impl::pml_prompt(ApiRequest& r) {
  Request built;
  try {
    built = engine.pml_request(r.pml, r.pml_cache, "pml");
  } catch (const Error& e) {
    throw api_error_of(e.status(), "pml", "schema", pml_code(e.status()));
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

// The request's constraint compiled, in a child process under the server's
// budget and stopped when the client hangs up (the vocabulary's cache keeps
// the result, so an agent's repeated schema compiles once). A schema or
// grammar that does not compile, or not within its CPU or memory budget, is
// the client's mistake: a 400 with the reason; a server too busy to run the
// compile (no place for it, or its wall time spent first) is a 503. An
// optional constraint (ApiRequest::constraint_optional) is dropped instead,
// and waited for a second at most (kOptionalPatience; its CPU budget if
// less): a busy server serves the request as it would have without it
// rather than refuse it or keep it waiting, while the compile goes on in
// the background for the next request with the same tools (outcome
// "pending").
void Server::Impl::constrain(ApiRequest& r, HttpResponse& res, const HttpExchange& ex) {
  constexpr double kOptionalPatience = 1.0;
  ProcessBudget budget;
  budget.cpu_seconds = opt.grammar_cpu_seconds;
  // The compiler runs niced beside the engine.
  budget.wall_seconds = 3 * opt.grammar_cpu_seconds;
  budget.memory_bytes = opt.grammar_memory_bytes;
  budget.cancelled = [&ex] { return ex.client_gone(); };
  const auto count = [&](const char* outcome) {
    std::lock_guard lock(mu);
    ++http_counts.constraints[outcome];
  };
  const auto drop = [&] {
    count("dropped");
    r.constraint.reset();
    r.calls_constrained = false;
    r.engine.grammar = nullptr;
    r.engine.grammar_triggers.clear();
    r.engine.grammar_after_thought = false;
  };
  try {
    if (r.constraint_optional) {
      r.engine.grammar =
          engine.compile_grammar(*r.constraint, budget, std::min(kOptionalPatience, opt.grammar_cpu_seconds));
      if (!r.engine.grammar) {
        count("pending");
        drop();
        return;
      }
    } else {
      r.engine.grammar = engine.compile_grammar(*r.constraint, budget);
    }
    count("ready");
  } catch (const GrammarError& e) {
    count(e.why() == GrammarFailure::kOverBudget      ? "over_budget"
          : e.why() == GrammarFailure::kCancelled     ? "cancelled"
          : e.why() == GrammarFailure::kCompilerFailed ? "failed"
          : e.why() == GrammarFailure::kBusy           ? "busy"
                                                       : "invalid");
    if (r.constraint_optional && e.why() != GrammarFailure::kCancelled) {
      drop();
      return;
    }
    if (e.why() == GrammarFailure::kBusy) {  // the server's state, not the constraint's fault
      res.headers.emplace_back("Retry-After", "5");
      throw ApiError{503, r.constraint_param + ": " + e.what(), "server_error", r.constraint_param, "compiles_busy"};
    }
    const bool schema = r.constraint->kind == GrammarKind::kJsonSchema || r.constraint->kind == GrammarKind::kAnyJson;
    const bool regex = r.constraint->kind == GrammarKind::kRegex;
    throw ApiError{400, r.constraint_param + ": " + e.what(), "invalid_request_error", r.constraint_param,
                   schema ? "invalid_schema" : regex ? "invalid_regex" : "invalid_grammar"};
  }
}

// The request's constraint compiled and the request queued; a refusal is
// the client's error (or a 429/503).
RequestHandle Server::Impl::submit(ApiRequest& ar, HttpResponse& res, const HttpExchange& ex) {
  if (ar.constraint) constrain(ar, res, ex);
  try {
    return engine.submit(ar.engine);
  } catch (const RequestError& e) {
    throw refused(e, res);
  }
}

namespace {

// A stream's events in OpenAI's shapes (chat.completion.chunk or
// text_completion), ending with the usage chunk when asked and [DONE].
struct OpenAiEvents {
  ApiResponder out;
  bool include_usage;
  std::string open() { return {}; }
  std::string event(const StreamEvent& ev) { return out.chunk(ev); }
  std::string close(const Result& r) { return (include_usage ? out.usage_chunk(r) : "") + ApiResponder::done(); }
  static std::string keep_alive() { return ": keep-alive\n\n"; }
};

// A stream's events in the Messages API's shapes: message_start first,
// ping while quiet, an error event for a completion that failed.
struct MessagesEvents {
  MessagesResponder out;
  int prompt_tokens;
  std::string open() { return out.start(prompt_tokens); }
  std::string event(const StreamEvent& ev) {
    if (ev.kind == StreamEvent::Kind::kFinish)
      if (auto e = failure(ev.reason, ev.message)) return MessagesResponder::error_event(*e);
    return out.event(ev);
  }
  std::string close(const Result& r) { return out.finish(r); }
  static std::string keep_alive() { return MessagesResponder::ping(); }
};

}  // namespace

void Server::Impl::generate(const HttpRequest& req, HttpResponse& res, HttpExchange& ex, Outcome& o, bool is_chat) {
  o.id = random_id(is_chat ? "chatcmpl-" : "cmpl-");
  ApiRequest ar = is_chat ? parse_chat_request(req.body, limits) : parse_completion_request(req.body, limits);
  if (!ar.pml.empty()) pml_prompt(ar);
  RequestHandle h = submit(ar, res, ex);
  if (ar.stream) {
    OpenAiEvents events{ApiResponder(ar, engine.model().tokenizer(), o.id, unix_now()), ar.include_usage};
    stream(events, ar.engine.n, h, res, ex, o);
  } else if (wait_whole(h, res, ex, o)) {
    res.body = ApiResponder(ar, engine.model().tokenizer(), o.id, unix_now()).response(*o.result);
  }
}

// Anthropic's Messages API on the same engine (server/messages_api.h).
void Server::Impl::messages(const HttpRequest& req, HttpResponse& res, HttpExchange& ex, Outcome& o) {
  o.id = random_id("msg_");
  MessagesRequest mr = parse_messages_request(req.body, limits);
  RequestHandle h = submit(mr.chat, res, ex);
  if (mr.chat.stream) {
    MessagesEvents events{MessagesResponder(mr, o.id), int(mr.chat.engine.prompt.size())};
    stream(events, 1, h, res, ex, o);
    if (res.status != 200) return;
  } else {
    if (!wait_whole(h, res, ex, o)) return;
    res.body = MessagesResponder(mr, o.id).response(*o.result);
  }
  // cache_control: the prefixes the answer just left in the cache, held
  // there for their time (cache/prefix_holds.h).
  const std::vector<int32_t>& prompt = mr.chat.engine.prompt;
  for (const Breakpoint& b : mr.breakpoints)
    engine.hold_prefix({prompt.begin(), prompt.begin() + b.tokens}, b.ttl);
}

void Server::Impl::count_tokens(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  res.body = dump({{"input_tokens", count_messages_tokens(req.body, limits)}});
}

// A stream's events in the Responses API's shapes.
namespace {
struct ResponsesEvents {
  ResponsesResponder& out;
  std::string open() { return out.start(); }
  std::string event(const StreamEvent& ev) {
    if (ev.kind == StreamEvent::Kind::kFinish)
      if (auto e = failure(ev.reason, ev.message)) return out.error_event(*e);
    return out.event(ev);
  }
  std::string close(const Result& r) { return out.finish(r); }
  static std::string keep_alive() { return ": keep-alive\n\n"; }
};
}  // namespace

// OpenAI's Responses API (server/responses_api.h): the answer, and with
// `store` the conversation it ends, kept for GET and previous_response_id.
void Server::Impl::responses_post(const HttpRequest& req, HttpResponse& res, HttpExchange& ex, Outcome& o) {
  o.id = random_id("resp_");
  ResponsesRequest rr = parse_responses_request(req.body, limits, responses);
  RequestHandle h = submit(rr.chat, res, ex);
  ResponsesResponder out(rr, o.id, unix_now());
  if (rr.chat.stream) {
    ResponsesEvents events{out};
    stream(events, 1, h, res, ex, o);
    if (res.status != 200) return;  // the client left: nothing to keep
  } else {
    if (!wait_whole(h, res, ex, o)) return;
    res.body = out.object(&*o.result);
  }
  if (rr.store) {
    auto kept = std::make_shared<StoredResponse>();
    kept->object = rr.chat.stream ? out.object(&*o.result) : res.body;  // a whole answer is the object
    kept->conversation = out.conversation(*o.result);
    responses.put(o.id, std::move(kept));
  }
}

void Server::Impl::responses_get(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  const auto kept = req.rest.find('/') == std::string::npos ? responses.get(req.rest) : nullptr;
  if (!kept)
    throw ApiError{404, "Response with id '" + req.rest + "' not found (never stored, deleted, or evicted from this server's store)",
                   "invalid_request_error", "", "response_not_found"};
  res.body = kept->object;
}

void Server::Impl::responses_delete(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  if (req.rest.find('/') != std::string::npos || !responses.remove(req.rest))
    throw ApiError{404, "Response with id '" + req.rest + "' not found", "invalid_request_error", "", "response_not_found"};
  res.body = dump({{"id", req.rest}, {"object", "response"}, {"deleted", true}});
}

// A whole answer: false when the client hung up while it waited (the
// request is cancelled, the status 499). A completion that failed is the
// request's error.
bool Server::Impl::wait_whole(RequestHandle& h, HttpResponse& res, HttpExchange& ex, Outcome& o) {
  while (!h.wait_for(std::chrono::milliseconds(100)))
    if (ex.client_gone()) {
      h.cancel();
      o.result = h.wait();
      res.status = 499;  // logged; nobody is there to read it
      return false;
    }
  o.result = h.wait();
  for (const Completion& c : o.result->completions)
    if (auto e = failure(c.reason, c.message)) throw *e;
  return true;
}

// Server-sent events. The status line waits for the first event (or a
// second of quiet), so a request that fails before its first token still
// gets its 4xx/5xx status rather than an error inside a 200 stream.
template <class Events>
void Server::Impl::stream(Events& events, int n, RequestHandle& h, HttpResponse& res, HttpExchange& ex, Outcome& o) {
  bool started = false, ok = true;
  const std::string opening = events.open();  // before any event: the API may number its events
  auto write = [&](const std::string& s) {
    if (!started) {
      started = true;
      ok = ex.begin_stream(200, {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}});
      ok = ok && ex.write(opening);
    }
    ok = ok && !ex.client_gone() && ex.write(s);
    return ok;
  };
  while (ok) {
    auto ev = h.next(std::chrono::milliseconds(1000));
    if (ev) {
      const auto failed = ev->kind == StreamEvent::Kind::kFinish ? failure(ev->reason, ev->message) : std::nullopt;
      if (failed && !started && n == 1) {
        o.result = h.wait();
        throw *failed;
      }
      const std::string c = events.event(*ev);
      if (!c.empty()) write(c);
      continue;
    }
    if (!h.done()) {
      // Quiet (queued, or a long prefill): a keep-alive finds out whether
      // the client is still there.
      write(Events::keep_alive());
      continue;
    }
    o.result = h.wait();
    // The stream's end delivered is a whole stream: a client that closes at
    // once may beat the chunked terminator, and that is no 499.
    ok = write(events.close(*o.result));
    if (ok) ex.end();
    break;
  }
  if (!ok) {
    h.cancel();
    o.result = h.wait();
  }
  res.status = ok ? 200 : 499;
}

void Server::Impl::health(const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
  res.status = draining ? 503 : 200;
  res.body = draining ? R"({"status":"draining"})" : R"({"status":"ok"})";
}

void Server::Impl::kv_tree(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  // ?max_nodes=N (1-512, default 256), ?text=T tokens of text per node (0-48, default 24 with --tree-text, else 0)
  const auto param = [&](const char* name, int lo, int hi, int dflt) {
    const std::string* v = req.param(name);
    if (!v) return dflt;
    const std::optional<long> n = parse_long(*v);
    if (!n || *n < lo || *n > hi)
      throw ApiError{400,
                     std::string(name) + "=" + *v + ": expected an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]",
                     "invalid_request_error", name, "invalid_value"};
    return int(*n);
  };
  const int max_nodes = param("max_nodes", 1, Engine::kTreeNodes, 256);
  // The cached text is every user's prompts and answers: shown only when the operator says so.
  const int text = param("text", 0, Engine::kTreeHead, opt.tree_text ? 24 : 0);
  if (text > 0 && !opt.tree_text)
    throw ApiError{403,
                   "text=" + std::to_string(text) +
                       ": this server does not show cached text (it holds every user's prompts); its operator can "
                       "allow it with serve --tree-text",
                   "permission_error", "text", "tree_text_disabled"};
  json tree = kv_tree_json(*engine.kv_tree(), engine.model().tokenizer(), max_nodes, text);
  tree["text_shown"] = opt.tree_text;
  // ?blocks=1: the blocks the KV events describe, as the tree holds them now
  // (hashes name token runs the events already publish).
  if (param("blocks", 0, 1, 0) == 1) {
    if (opt.worker.kv_events.endpoint.empty())
      throw ApiError{400, "blocks=1: this server publishes no KV events (serve --kv-events)", "invalid_request_error",
                     "blocks", "kv_events_disabled"};
    const std::vector<uint64_t> hashes = engine.kv_block_hashes();
    tree["blocks"] = {{"block_size", engine.options().kv_event_block_size}, {"count", hashes.size()}, {"hashes", hashes}};
  }
  res.body = dump(tree);
}

void Server::Impl::models(const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
  res.body = dump({{"object", "list"}, {"data", json::array({model_card(engine, opt.worker, unix_now())})}});
}

// Routers' "forget what you cached": retained prefixes go; chunks running
// sequences read and pinned Prompt Cache modules stay.
void Server::Impl::flush_cache(const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
  const int freed = engine.flush_cache();
  const EngineStats s = engine.stats();
  res.body = dump({{"flushed", true}, {"chunks_freed", freed}, {"chunks_in_use", s.kv.used}, {"chunks_pinned", s.kv.pinned}});
}

namespace {

// A body nesting deeper than requests may (base/json_depth.h): a 400 before
// it is parsed.
void refuse_deep(const std::string& body) {
  const int depth = json_nesting(body);
  if (depth > kMaxJsonNesting)
    throw ApiError{400,
                   "the body nests " + std::to_string(depth) + " levels deep; at most " +
                       std::to_string(kMaxJsonNesting) + " are accepted",
                   "invalid_request_error", "", "too_deeply_nested"};
}

}  // namespace

// Two shapes: llama-server's {"content"} (the text's tokens), and vLLM's
// {"model", "prompt"} or {"model", "messages"}: the exact prompt tokens the
// same body would run as a completion or chat request (chat template, tools
// and all), which is what routers hash to find the replica holding a prefix.
void Server::Impl::tokenize(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  const Tokenizer& tok = engine.model().tokenizer();
  refuse_deep(req.body);
  const json j = json::parse(req.body, nullptr, false);
  const char* shape =
      "the body must be {\"content\": string, \"add_special\": bool, \"with_pieces\": bool}, or a completion "
      "({\"model\", \"prompt\"}) or chat ({\"model\", \"messages\"}) request";
  if (!j.is_discarded() && j.is_object() && !j.contains("content") && (j.contains("prompt") || j.contains("messages"))) {
    const ApiRequest ar = j.contains("messages") ? parse_chat_request(req.body, limits) : parse_completion_request(req.body, limits);
    res.body = dump({{"count", ar.engine.prompt.size()}, {"max_model_len", engine.n_ctx()}, {"tokens", ar.engine.prompt},
                     {"token_strs", nullptr}});
    return;
  }
  if (j.is_discarded() || !j.is_object() || !j.contains("content") || !j["content"].is_string())
    throw ApiError{400, shape, "invalid_request_error", "content", ""};
  auto flag = [&](const char* name) {
    if (!j.contains(name) || j[name].is_null()) return false;
    if (!j[name].is_boolean())
      throw ApiError{400, std::string(name) + " must be true or false, got " + dump(j[name]), "invalid_request_error",
                     name, "invalid_type"};
    return j[name].get<bool>();
  };
  const bool special = flag("add_special");
  const bool pieces = flag("with_pieces");
  const auto ids = tok.encode(j["content"].get<std::string>(), special, special);
  json out = json::array();
  if (pieces)
    for (int32_t id : ids) out.push_back({{"id", id}, {"piece", tok.piece(id)}});
  else
    out = ids;
  res.body = dump({{"tokens", out}});
}

void Server::Impl::detokenize(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  const Tokenizer& tok = engine.model().tokenizer();
  refuse_deep(req.body);
  const json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    throw ApiError{400, "the body must be {\"tokens\": [ids]}", "invalid_request_error", "tokens", ""};
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= tok.vocab_size())
      throw ApiError{400,
                     "token " + dump(t) + " is not in the vocabulary (0 to " + std::to_string(tok.vocab_size() - 1) + ")",
                     "invalid_request_error", "tokens", ""};
    ids.push_back(int32_t(t.get<long long>()));
  }
  res.body = dump({{"content", tok.decode(ids)}});
}

namespace {

json schema_json(const SchemaInfo& s) {
  return {{"object", "schema"},  {"name", s.name},   {"positions", s.positions}, {"tokens", s.tokens},
          {"modules", s.modules}, {"scaffolds", s.scaffolds}, {"bytes", s.bytes}, {"encode_seconds", s.encode_s},
          {"restored", s.restored}};
}

}  // namespace

void Server::Impl::schema_post(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  // src= reads files only below the directory the operator allowed.
  const pml::SrcFiles files =
      opt.pml_src_dir.empty() ? pml::SrcFiles::refuse() : pml::SrcFiles::confined_to(opt.pml_src_dir);
  try {
    pml::Schema schema = pml::parse_schema(req.body, "schema", files);
    const SchemaInfo info = opt.schema_dir.empty() ? engine.register_schema(std::move(schema))
                                                   : register_saved_schema(engine, std::move(schema), opt.schema_dir);
    json body = schema_json(info);
    body["saved"] = !opt.schema_dir.empty();
    res.body = dump(body);
  } catch (const Error& e) {
    throw api_error_of(e.status(), "", "schema", pml_code(e.status()));
  }
}

void Server::Impl::schema_list(const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
  json data = json::array();
  for (const SchemaInfo& s : engine.schemas()) data.push_back(schema_json(s));
  res.body = dump({{"object", "list"}, {"data", data}});
}

void Server::Impl::schema_delete(const HttpRequest& req, HttpResponse& res, HttpExchange&, Outcome&) {
  const std::string& name = req.rest;
  if (name.find('/') != std::string::npos)
    throw ApiError{404, "no route for DELETE " + req.path, "invalid_request_error", "", ""};
  try {
    engine.unregister_schema(name);
  } catch (const Error& e) {
    throw api_error_of(e.status());
  }
  json body = {{"object", "schema"}, {"name", name}, {"deleted", true}};
  if (!opt.schema_dir.empty()) try {
      remove_saved_schema(opt.schema_dir, name);
    } catch (const Error& e) {  // unregistered all the same; say what is left on disk
      body["saved_copy"] = e.what();
    }
  res.body = dump(body);
}

void Server::Impl::metrics(const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
  HttpCounts counts;
  {
    std::lock_guard lock(mu);
    counts = http_counts;
    counts.stored_responses = responses.stats();
  }
  res.content_type = "text/plain; version=0.0.4";
  res.body = prometheus_text(engine.stats(), counts, opt.model_id, engine.schemas());
}

void Server::Impl::routes() {
  using std::placeholders::_1, std::placeholders::_2, std::placeholders::_3, std::placeholders::_4;
  http.before([this](const HttpRequest& req, HttpResponse& res) { return before(req, res); });
  http.on_error([this](const HttpRequest* req, int status, const std::string& message) {
    return transport_error(req, status, message);
  });
  const RouteFn server_info_fn = [this](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
    res.body = dump(server_info(engine, opt.worker));
  };
  const RouteFn model_info_fn = [this](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
    res.body = dump(model_info(engine, opt.worker));
  };
  const RouteFn load_fn = [this](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
    res.body = dump(load_info(engine.stats()));
  };
  const struct {
    const char* method;
    const char* path;
    RouteFn fn;
    bool prefix = false;
  } table[] = {
      {"GET", "/health", std::bind(&Impl::health, this, _1, _2, _3, _4)},
      {"GET", "/", [](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
         res.content_type = "text/html; charset=utf-8";
         res.body = kConsolePage;
       }},
      {"GET", "/v1/kv/tree", std::bind(&Impl::kv_tree, this, _1, _2, _3, _4)},
      {"GET", "/v1/models", std::bind(&Impl::models, this, _1, _2, _3, _4)},
      {"POST", "/v1/completions", std::bind(&Impl::generate, this, _1, _2, _3, _4, false)},
      {"POST", "/v1/chat/completions", std::bind(&Impl::generate, this, _1, _2, _3, _4, true)},
      {"POST", "/v1/messages", std::bind(&Impl::messages, this, _1, _2, _3, _4)},
      {"POST", "/v1/messages/count_tokens", std::bind(&Impl::count_tokens, this, _1, _2, _3, _4)},
      {"POST", "/v1/responses", std::bind(&Impl::responses_post, this, _1, _2, _3, _4)},
      {"GET", "/v1/responses/", std::bind(&Impl::responses_get, this, _1, _2, _3, _4), true},
      {"DELETE", "/v1/responses/", std::bind(&Impl::responses_delete, this, _1, _2, _3, _4), true},
      {"POST", "/tokenize", std::bind(&Impl::tokenize, this, _1, _2, _3, _4)},
      {"POST", "/detokenize", std::bind(&Impl::detokenize, this, _1, _2, _3, _4)},
      {"POST", "/v1/schemas", std::bind(&Impl::schema_post, this, _1, _2, _3, _4)},
      {"GET", "/v1/schemas", std::bind(&Impl::schema_list, this, _1, _2, _3, _4)},
      {"DELETE", "/v1/schemas/", std::bind(&Impl::schema_delete, this, _1, _2, _3, _4), true},
      {"GET", "/metrics", std::bind(&Impl::metrics, this, _1, _2, _3, _4)},
      {"GET", "/version", [this](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
         res.body = dump({{"version", opt.worker.version}});
       }},
      {"GET", "/server_info", server_info_fn},
      {"GET", "/get_server_info", server_info_fn},
      {"GET", "/model_info", model_info_fn},
      {"GET", "/get_model_info", model_info_fn},
      {"GET", "/get_load", load_fn},
      {"GET", "/v1/loads", [this](const HttpRequest&, HttpResponse& res, HttpExchange&, Outcome&) {
         res.body = dump({{"object", "list"}, {"data", json::array({load_info(engine.stats())})}});
       }},
      {"POST", "/flush_cache", std::bind(&Impl::flush_cache, this, _1, _2, _3, _4)},
  };
  for (const auto& r : table) add(r.method, r.path, r.fn, r.prefix);
}

Server::Server(Engine& engine, ServerOptions opt) : impl_(std::make_unique<Impl>(engine, std::move(opt))) {}
Server::~Server() = default;

int Server::bind() { return impl_->http.bind(); }

void Server::serve() { impl_->http.run(); }

void Server::stop() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  m.engine.shutdown(m.opt.grace);  // in-flight requests finish (or are cancelled at the end)
  m.http.stop();
}

}  // namespace cs
